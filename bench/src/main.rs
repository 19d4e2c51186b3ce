//! `strand-bench`: measures the machine's physics and Strand against it.
//!
//! Every engine figure is printed next to the physics figure it is bounded by, as a ratio
//! (ARCHITECTURE.md, Measuring). Benchmarks are never tests: nothing here asserts a time.

mod disk;
mod stats;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "strand-bench", version, about = "Strand benchmark harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Disk physics of the data directory (O_DIRECT write/read bandwidth, write+fdatasync
    /// latency) and the storage engine's append+flush throughput and flush latency, as
    /// ratios to the physics.
    Disk(disk::DiskArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Disk(args) => disk::run(args),
    }
}
