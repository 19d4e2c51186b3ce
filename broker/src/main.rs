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
    let result =
        logging::init(config.log_format, &config.log_level).and_then(|()| shard::run(config));
    if let Err(e) = result {
        eprintln!("strand: {e:#}");
        std::process::exit(1);
    }
}
