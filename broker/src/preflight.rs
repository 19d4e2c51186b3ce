//! Start-up checks that fail loudly with the fix in the message (ARCHITECTURE.md, The
//! shard runtime): data directory usable with O_DIRECT, Kafka port free. io_uring and
//! locked memory are checked when the executors start (`shard::run`).

use anyhow::{bail, Context};

use crate::config::Config;

/// Runs the checks.
pub fn check(config: &Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data directory {}", config.data_dir.display()))?;
    if let Err(e) = strand_storage::io::probe_direct_io(&config.data_dir) {
        if !config.allow_buffered_io {
            bail!("{e}");
        }
        tracing::warn!(error = %e, "data directory without O_DIRECT: using buffered i/o as configured");
    }
    if let Err(e) = std::net::TcpListener::bind(config.kafka_addr) {
        bail!(
            "cannot listen on {} ({e}): another process uses the port; stop it or pick \
             another address with --kafka-addr",
            config.kafka_addr
        );
    }
    if let Err(e) = std::net::TcpListener::bind(config.admin_addr) {
        bail!(
            "cannot listen on {} for admin HTTP ({e}): stop the process using it or pick \
             another address with --admin-addr",
            config.admin_addr
        );
    }
    Ok(())
}
