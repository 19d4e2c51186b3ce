//! `strand-bench compare A.json B.json`.

/// Options of `strand-bench compare`.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    a: std::path::PathBuf,
    b: std::path::PathBuf,
}

pub fn run(_args: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("compare: not written yet")
}
