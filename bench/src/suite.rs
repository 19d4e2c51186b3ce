//! `strand-bench suite`.

/// Options of `strand-bench suite`.
#[derive(clap::Args, Debug)]
pub struct SuiteArgs {}

pub fn run(_args: SuiteArgs) -> anyhow::Result<()> {
    anyhow::bail!("suite: not written yet")
}
