//! `strand`: the Strand broker server (ARCHITECTURE.md). Parses configuration, runs the
//! start-up checks and the shards, and exits 0 after a clean SIGTERM/SIGINT shutdown.

use clap::Parser;
use strand_broker::{common, runtime, start};

fn main() {
    runtime::crash::abort_on_panic();
    let flags = common::config::Flags::parse();
    let check = flags.check;
    let config = match common::config::Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("strand: {e:#}");
            std::process::exit(1);
        }
    };
    if check {
        std::process::exit(runtime::preflight::report(&runtime::preflight::findings(
            &config,
        )));
    }
    let result = common::logging::init(config.log_format, &config.log_level)
        .and_then(|()| crash_evidence(&config))
        .and_then(|()| start::run(config));
    // Any return from here is orderly (an error is logged below); only a signal or a kill
    // leaves the running marker for the next start to find.
    runtime::crash::clean_exit();
    if let Err(e) = result {
        eprintln!("strand: {e:#}");
        std::process::exit(1);
    }
}

/// Installs the fatal-signal reports and logs how the previous run of this data directory
/// ended.
fn crash_evidence(config: &common::config::Config) -> anyhow::Result<()> {
    let previous = runtime::crash::install(&config.data_dir)?;
    if previous.unclean {
        tracing::warn!(
            signal = previous.signal_label(),
            report = %config.data_dir.join(runtime::crash::CRASH_REPORT_PREV_FILE).display(),
            "the previous run of this data directory did not exit cleanly (crash, kill -9, \
             power loss or OOM kill); a crash report, if one was written, is in the file named"
        );
    }
    Ok(())
}
