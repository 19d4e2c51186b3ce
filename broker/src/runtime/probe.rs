//! `strand --check`'s io_uring probe: builds (and drops) one glommio executor with the
//! planned locked memory, which sets up the same three io_uring rings a shard uses. Lives
//! under `shard*` because it names glommio (STYLE.md 1).
//!
//! Invariant: only called from `--check`, on the main thread, before any shard exists.

use glommio::{LocalExecutorBuilder, Placement};

/// Creates an executor like a shard's and drops it; the error names the fix.
pub fn probe_io_uring(io_memory_bytes: usize) -> Result<(), String> {
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("strand-check")
        .io_memory(io_memory_bytes)
        .make()
        .map(drop)
        .map_err(|e| {
            format!(
                "cannot create an io_uring executor: {e}; check that io_uring is enabled \
                 (sysctl kernel.io_uring_disabled=0) and not blocked by seccomp"
            )
        })
}
