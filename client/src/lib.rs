//! `strand-client`: the native, shard-aware Rust client for Strand (work in progress, issue 6).
