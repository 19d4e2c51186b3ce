//! `strand-bench`: measures the machine's physics and brokers against it.
//!
//! Every broker figure is printed next to the physics figure it is bounded by, as a ratio
//! (ARCHITECTURE.md, Measuring). Benchmarks are never tests: nothing here asserts a time
//! (the harness's own honesty tests, in `tests.rs`, check that it measures what it says).

mod compare;
mod disk;
mod driver;
mod floor;
mod kafka_conn;
mod kafka_driver;
mod light;
mod load;
mod native_driver;
mod physics;
mod plot;
mod result;
mod stats;
mod suite;
mod txn;
mod workload;

#[cfg(test)]
mod tests;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "strand-bench", version, about = "Strand benchmark harness")]
struct Cli {
    /// Connect to Kafka listeners with TLS, trusting the CA certificates in this PEM file
    /// (an SSL listener; `tools/certs.sh` makes a test CA).
    #[arg(long, global = true, env = "STRAND_BENCH_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Disk physics of the data directory (O_DIRECT write/read bandwidth, write+fdatasync
    /// latency) and the storage engine's append+flush throughput and flush latency, as
    /// ratios to the physics.
    Disk(disk::DiskArgs),
    /// The machine's physics: O_DIRECT bandwidth, write+fdatasync latency (4 KiB, 1 MiB)
    /// and TCP round trip (loopback echo, or --target); table and JSON (--out).
    Physics(physics::PhysicsArgs),
    /// The replicated-write floor: the simplest acks=all, 3-node write (threads, loopback
    /// TCP, O_DIRECT + O_DSYNC files) at a fixed rate, as a reference for the cluster.
    Floor(floor::FloorArgs),
    /// Produce load; latency from each record's intended send time.
    Produce(workload::WorkloadArgs),
    /// Consume the topic from its start; throughput and fetch latency.
    Consume(workload::WorkloadArgs),
    /// Produce and consume at once; latency from intended send time to consumption.
    E2e(workload::WorkloadArgs),
    /// Two result files side by side, with ratios.
    Compare(compare::CompareArgs),
    /// The standard matrix (1 and 16 partitions, acks 1 and all; saturation, then 50% and
    /// 90% of it), optionally against a peer broker too; writes report.md with plots.
    Suite(suite::SuiteArgs),
    /// Transactions of N records (commit latency, records/s) against the same records from
    /// an idempotent producer.
    Txn(txn::TxnArgs),
    /// Tail latency at light load (issue 30): 10,000 records/s of 100 B, linger 0, one
    /// partition, open loop; runs of 60 s with p99 and p99.9 over write+fdatasync + RTT.
    Light(light::LightArgs),
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
    if let Some(ca) = &cli.tls_ca {
        kafka_conn::use_tls(ca)?;
    }
    match cli.command {
        Command::Disk(args) => disk::run(args),
        Command::Physics(args) => physics::run(args),
        Command::Floor(args) => floor::run(args),
        Command::Produce(args) => workload::run(args, load::Mode::Produce),
        Command::Consume(args) => workload::run(args, load::Mode::Consume),
        Command::E2e(args) => workload::run(args, load::Mode::E2e),
        Command::Compare(args) => compare::run(args),
        Command::Suite(args) => suite::run(args),
        Command::Txn(args) => txn::run(args),
        Command::Light(args) => light::run(args),
    }
}
