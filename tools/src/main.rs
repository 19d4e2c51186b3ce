//! `strandctl`: the operator's tool for Strand (work in progress, issue 8).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "strandctl",
    version,
    about = "Manage and check a Strand cluster"
)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
