//! `strandctl`: the operator's tool for Strand (issue 8) — topics, groups, produce and
//! consume, cluster info and health, config validation, host tuning and a self-test.
//!
//! It speaks plain Kafka (module [`kafka`]) and the admin HTTP API ([`admin_http`]), so
//! the Kafka commands also work against other Kafka brokers. Each command module returns
//! the text to print; this file parses the command line, runs it and maps the result to
//! an exit code.
//!
//! Exit codes (also in `--help`, [`cli::EXIT_CODES_HELP`]):
//! 0 success; 1 error talking to the broker or admin API, or I/O; 2 usage;
//! 3 a check found problems (health not ready, tune check found changes, config validate
//! findings, self-test WARN with `--strict`); 4 refused by the broker for the current
//! state (a Kafka error code, e.g. reset-offsets on an active group, topic exists).

mod acl;
mod admin_http;
mod broker;
mod cli;
mod cluster;
mod config_validate;
mod consume;
mod drain;
mod group;
mod kafka;
mod offsets;
mod output;
mod produce;
mod quota;
mod route;
mod secure;
mod self_test;
mod topic;
mod transactions;
mod tune;
mod user;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};

use cli::{Cli, ClusterCmd, Command, ConfigCmd, TuneCmd};
use kafka::KafkaClient;

/// Exit code: error talking to the broker, or I/O.
const EXIT_ERROR: u8 = 1;
/// Exit code: a check found problems.
const EXIT_PROBLEMS: u8 = 3;
/// Exit code: the broker refused for the current state.
const EXIT_REFUSED: u8 = 4;

/// Whether a command's checks passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// All good (exit 0).
    Ok,
    /// Problems found (exit 3).
    Problems,
}

/// The broker (or the cluster state) said no; exit 4 with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Problems) => ExitCode::from(EXIT_PROBLEMS),
        // A closed stdout (`strandctl consume t | head`) is the reader's choice, not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strandctl: {e:#}");
            ExitCode::from(exit_code_of(&e))
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn exit_code_of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<Refused>().is_some() {
        return EXIT_REFUSED;
    }
    match e.downcast_ref::<kafka::KafkaError>() {
        Some(kafka::KafkaError::Broker { .. }) => EXIT_REFUSED,
        _ => EXIT_ERROR,
    }
}

fn print(text: &str) -> anyhow::Result<Outcome> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(Outcome::Ok)
}

fn validate_config(file: &std::path::Path) -> anyhow::Result<Outcome> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let findings = config_validate::validate(&text);
    print(&config_validate::render(
        &file.display().to_string(),
        &findings,
    ))?;
    Ok(if findings.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Problems
    })
}

fn run_tune(cmd: &TuneCmd) -> anyhow::Result<Outcome> {
    match cmd {
        TuneCmd::Check { data_dir } => {
            let rows = tune::collect(data_dir);
            print(&tune::render(&rows))?;
            let changes = rows.iter().any(|r| r.status == tune::Status::Change);
            Ok(if changes {
                Outcome::Problems
            } else {
                Outcome::Ok
            })
        }
        TuneCmd::Apply { data_dir, yes } => {
            let rows = tune::collect(data_dir);
            print(&tune::render(&rows))?;
            let done = tune::apply(&rows, *yes, &mut std::io::stdout().lock())?;
            Ok(if done { Outcome::Ok } else { Outcome::Problems })
        }
    }
}

fn stdin() -> std::io::StdinLock<'static> {
    std::io::stdin().lock()
}

fn run(cli: &Cli) -> anyhow::Result<Outcome> {
    if let Some(path) = &cli.command_config {
        secure::load(path)?;
    }
    let timeout = Duration::from_millis(cli.request_timeout_ms.max(1));
    let connect = || KafkaClient::connect(&cli.brokers, timeout);
    match &cli.command {
        Command::Topic(cmd) => print(&topic::run(&mut connect()?, cmd, &cli.admin)?),
        Command::Group(cmd) => print(&group::run(&mut connect()?, cmd, &cli.admin, timeout)?),
        Command::Transactions(cmd) => print(&transactions::run(&mut connect()?, cmd, timeout)?),
        Command::Acl(cmd) => print(&acl::run(&mut connect()?, cmd)?),
        Command::Quota(cmd) => print(&quota::run(&mut connect()?, cmd)?),
        Command::User(cmd) => print(&user::run(&mut connect()?, cmd, &mut stdin())?),
        Command::Produce(args) => print(&produce::run(&mut connect()?, args, &mut stdin())?),
        Command::Consume(args) => {
            let mut client = connect()?;
            let summary = consume::run(&mut client, args, timeout, &mut std::io::stdout().lock())?;
            eprint!("{summary}");
            Ok(Outcome::Ok)
        }
        Command::Broker(cmd) => print(&broker::run(&mut connect()?, cmd)?),
        Command::Cluster(ClusterCmd::Info) => print(&cluster::info(&mut connect()?)?),
        Command::Cluster(ClusterCmd::RemoveNode { id }) => {
            print(&cluster::remove_node(&mut connect()?, *id)?)
        }
        Command::Cluster(ClusterCmd::Quorum) => print(&cluster::quorum(&mut connect()?)?),
        Command::Cluster(ClusterCmd::AddController { id }) => {
            print(&cluster::change_controller(&mut connect()?, *id, true)?)
        }
        Command::Cluster(ClusterCmd::RemoveController { id }) => {
            print(&cluster::change_controller(&mut connect()?, *id, false)?)
        }
        Command::Cluster(ClusterCmd::Drain { id, wait_s }) => {
            let wait = wait_s.map(Duration::from_secs);
            let (text, outcome) = drain::drain(&mut connect()?, *id, wait)?;
            print(&text)?;
            Ok(outcome)
        }
        Command::Cluster(ClusterCmd::Health) => {
            let (text, outcome) = cluster::health(&cli.admin, timeout)?;
            print(&text)?;
            Ok(outcome)
        }
        Command::Config(ConfigCmd::Validate { file }) => validate_config(file),
        Command::SelfTest(args) => {
            let mut client = if args.skip_network {
                None
            } else {
                Some(connect()?)
            };
            let admin = (!args.peer_admin.is_empty()).then_some(cli.admin.as_str());
            let (text, outcome) = self_test::run(client.as_mut(), admin, args)?;
            print(&text)?;
            Ok(outcome)
        }
        Command::Tune(cmd) => run_tune(cmd),
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "strandctl",
                &mut std::io::stdout(),
            );
            Ok(Outcome::Ok)
        }
    }
}
