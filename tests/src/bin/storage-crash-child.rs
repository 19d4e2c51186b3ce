//! Child process of `tests/tests/crash_kill9.rs`: `storage-crash-child <dir> <seed>`.
//!
//! Opens (recovering) the log in `<dir>` and appends and flushes the deterministic
//! workload of `<seed>` (`strand_tests::crash_workload`) from wherever the log ends, until
//! it is killed. After each successful flush it prints `flushed <last_index> <next_offset>`
//! and flushes stdout: a printed line is an acknowledgement the parent holds it to.
//!
//! It stops by itself, with an error, when stdout is closed (the parent is gone) or the log
//! reaches `crash_workload::LOG_BYTES_MAX`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use strand_storage::{AppendEntry, Log, RaftIndex};
use strand_tests::{crash_workload, harness};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(seed), None) = (args.next(), args.next(), args.next()) else {
        bail!("usage: storage-crash-child <dir> <seed>");
    };
    let dir = PathBuf::from(dir);
    let seed: u64 = seed
        .parse()
        .with_context(|| format!("seed {seed:?} is not a u64"))?;
    harness::run("crash-child", append_until_killed(dir, seed))
}

async fn append_until_killed(dir: PathBuf, seed: u64) -> anyhow::Result<()> {
    let log = harness::open_log(&dir, crash_workload::log_config(), 1 << 20)
        .await
        .with_context(|| format!("opening {}", dir.display()))?;
    let mut entries: Vec<AppendEntry> = Vec::new();
    loop {
        if log.size_bytes() > crash_workload::LOG_BYTES_MAX {
            bail!(
                "log reached {} bytes: was the parent gone?",
                log.size_bytes()
            );
        }
        append_round(&log, seed, &mut entries)?;
        let durable = log.flush().await.context("flush")?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "flushed {} {}",
            durable.last_index.0, durable.next_offset.0
        )?;
        out.flush()?;
    }
}

/// Appends the next round of the workload in one call.
fn append_round(log: &Log, seed: u64, entries: &mut Vec<AppendEntry>) -> anyhow::Result<()> {
    let first = log.last_index().next();
    let n = crash_workload::entries_in_round(seed, first);
    entries.clear();
    entries.extend((0..n).map(|k| crash_workload::entry(seed, RaftIndex(first.0 + k))));
    let appended = log.append(entries).context("append")?;
    let last = appended.map(|a| a.index);
    anyhow::ensure!(
        last == Some(RaftIndex(first.0 + n - 1)),
        "appended up to {last:?}"
    );
    Ok(())
}
