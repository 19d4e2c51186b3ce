//! `strand`: the Strand broker server (ARCHITECTURE.md). Parses configuration, runs the
//! start-up checks and the shards, and exits 0 after a clean SIGTERM/SIGINT shutdown.

mod admin;
mod clock;
mod config;
mod errors;
mod group;
mod kafka;
mod metadata;
mod metastore;
mod native;
mod ops;
mod partition;
mod preflight;
mod producer_state;
mod shard;
mod shard_admin;
mod shard_conn;
mod shard_native;
mod shard_signals;
mod topic_config;

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRAND_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let flags = config::Flags::parse();
    let result = config::Config::load(flags).and_then(shard::run);
    if let Err(e) = result {
        eprintln!("strand: {e:#}");
        std::process::exit(1);
    }
}
