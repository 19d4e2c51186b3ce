//! `strand`: the Strand broker server (ARCHITECTURE.md). Parses configuration, runs the
//! start-up checks and the shards, and exits 0 after a clean SIGTERM/SIGINT shutdown.

mod admin;
mod admin_status;
mod checkpoint;
mod clock;
mod cluster;
mod cluster_join;
mod config;
mod errors;
mod group;
mod isr;
mod kafka;
mod logging;
mod metadata;
mod metastore;
mod metrics;
mod metrics_render;
mod native;
mod ops;
mod partition;
mod preflight;
mod producer_state;
mod raft_ack_timer;
mod raft_journal;
mod raft_store;
mod reassign;
mod shard;
mod shard_admin;
mod shard_conn;
mod shard_crash;
mod shard_native;
mod shard_netcheck;
mod shard_probe;
mod shard_replication;
mod shard_signals;
mod topic_config;

use clap::Parser;

fn main() {
    let flags = config::Flags::parse();
    let check = flags.check;
    let config = match config::Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("strand: {e:#}");
            std::process::exit(1);
        }
    };
    if check {
        std::process::exit(preflight::report(&preflight::findings(&config)));
    }
    let result = logging::init(config.log_format, &config.log_level)
        .and_then(|()| crash_evidence(&config))
        .and_then(|()| shard::run(config));
    // Any return from here is orderly (an error is logged below); only a signal or a kill
    // leaves the running marker for the next start to find.
    shard_crash::clean_exit();
    if let Err(e) = result {
        eprintln!("strand: {e:#}");
        std::process::exit(1);
    }
}

/// Installs the fatal-signal reports and logs how the previous run of this data directory
/// ended.
fn crash_evidence(config: &config::Config) -> anyhow::Result<()> {
    let previous = shard_crash::install(&config.data_dir)?;
    if previous.unclean {
        tracing::warn!(
            signal = previous.signal_label(),
            report = %config.data_dir.join(shard_crash::CRASH_REPORT_PREV_FILE).display(),
            "the previous run of this data directory did not exit cleanly (crash, kill -9, \
             power loss or OOM kill); a crash report, if one was written, is in the file named"
        );
    }
    Ok(())
}
