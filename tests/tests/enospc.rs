//! Disk full on a real filesystem (ARCHITECTURE.md, Bad input, limits, faults: "produce gets
//! an error, nothing acknowledged is lost, the broker recovers when space returns").
//!
//! A 16 MiB ext4 image is loop-mounted under the target dir with a 4 MiB filler file on it;
//! the log appends and flushes until a flush returns `StorageError::NoSpace`. Today's
//! behaviour, checked here: the log is not fenced; acknowledged entries read back intact;
//! appends while the disk is full are accepted and kept pending in memory (bounded by
//! `TAIL_PENDING_BYTES_MAX`, past which they fail with `TailFull`) and flushing them fails
//! with `NoSpace` again; once the filler is deleted, a retried flush makes every pending
//! entry durable, and a reopened log holds all of them.
//!
//! Needs root, `mkfs.ext4` and loop mounts; otherwise it prints `skipped: <reason>`, or
//! fails when `STRAND_REQUIRE_ROOT_TESTS=1` (CI).

use std::path::Path;

use strand_storage::{AppendEntry, Log, LogConfig, RaftIndex, StorageError};
use strand_tests::crash_workload::{self, Offsets};
use strand_tests::harness;
use strand_tests::mount::LoopMount;
use strand_tests::seed;

const IMAGE_BYTES: u64 = 16 * 1024 * 1024;
/// Deleting it is what "space returns" means.
const FILLER_BYTES: usize = 4 * 1024 * 1024;
/// About 100 KiB per flush: the image fills in under a hundred flushes.
const ENTRIES_PER_FLUSH: u64 = 64;
/// Entries appended while the disk is full.
const ENTRIES_WHILE_FULL: u64 = 16;
/// Give up if this much was appended without ENOSPC (four times the image).
const APPENDED_BYTES_MAX: u64 = 4 * IMAGE_BYTES;

/// The crash workload's log (256 KiB segments, so rolls and index writes happen near the
/// full disk too), without preallocation, so the data writes are what hits ENOSPC.
fn config() -> LogConfig {
    LogConfig {
        preallocate_bytes: 0,
        ..crash_workload::log_config()
    }
}

#[test]
fn enospc_is_an_error_that_loses_nothing_and_heals() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let Some(mount) = LoopMount::or_skip(root.path(), IMAGE_BYTES) else {
        return;
    };
    let seed = seed::test_seed("enospc");
    let filler = mount.fill("filler", FILLER_BYTES);
    let dir = mount.point.join("log");
    harness::run("enospc", scenario(&dir, &filler, &mount, seed.value));
}

async fn scenario(dir: &Path, filler: &Path, mount: &LoopMount, seed: u64) {
    let mut offsets = Offsets::new(seed);
    let log = harness::open_log(dir, config(), 0).await.expect("open log");
    let acked = fill_until_enospc(&log, seed).await;
    assert_eq!(log.fenced(), None, "ENOSPC must not fence the log");
    let durable = log.durable().last_index;
    assert!(
        durable >= acked,
        "durable {durable:?} behind acknowledged {acked:?}"
    );
    crash_workload::check_entries(&log, seed, &mut offsets, RaftIndex(1)).await;

    // Still full: appends are accepted and kept pending; flushing them fails again.
    append_next(&log, seed, ENTRIES_WHILE_FULL).expect("appends are kept pending while full");
    match log.flush().await {
        Err(StorageError::NoSpace { .. }) => {}
        other => panic!("flush on a full disk returned {other:?}, not NoSpace"),
    }
    assert_eq!(
        log.fenced(),
        None,
        "a repeated ENOSPC must not fence the log"
    );
    assert!(
        log.durable().last_index < log.last_index(),
        "pending entries are not durable"
    );
    crash_workload::check_entries(&log, seed, &mut offsets, log.last_index()).await;

    // Space returns: the retried flush makes everything durable.
    mount.free(filler);
    let last = log.last_index();
    let d = log.flush().await.expect("flush once space returns");
    assert_eq!(
        d.last_index, last,
        "the retried flush covers every pending entry"
    );
    drop(log);

    let log = harness::open_log(dir, config(), 0).await.expect("reopen");
    assert_eq!(
        log.last_index(),
        last,
        "every acknowledged entry survives the reopen"
    );
    crash_workload::check_entries(&log, seed, &mut offsets, RaftIndex(1)).await;
    append_next(&log, seed, ENTRIES_PER_FLUSH).expect("append after reopen");
    let d = log.flush().await.expect("flush after reopen");
    assert_eq!(d.last_index, log.last_index(), "appendable after reopen");
    eprintln!("acknowledged {acked:?} before ENOSPC; {last:?} durable after space returned");
}

/// Appends and flushes rounds until a flush fails with `NoSpace`; returns the last index a
/// successful flush acknowledged.
async fn fill_until_enospc(log: &Log, seed: u64) -> RaftIndex {
    let mut acked = RaftIndex(0);
    let mut appended_bytes = 0;
    loop {
        assert!(
            appended_bytes <= APPENDED_BYTES_MAX,
            "no ENOSPC after {appended_bytes} bytes"
        );
        appended_bytes += append_next(log, seed, ENTRIES_PER_FLUSH).expect("append");
        match log.flush().await {
            Ok(d) => {
                assert_eq!(
                    d.last_index,
                    log.last_index(),
                    "a flush covers all appended"
                );
                acked = d.last_index;
            }
            Err(StorageError::NoSpace { path }) => {
                eprintln!("NoSpace on {} after {appended_bytes} bytes", path.display());
                return acked;
            }
            Err(e) => panic!("flush failed with {e} where NoSpace was expected"),
        }
    }
}

/// Appends the next `n` workload entries in one call; returns their body bytes.
fn append_next(log: &Log, seed: u64, n: u64) -> Result<u64, StorageError> {
    let first = log.last_index().next();
    let entries: Vec<AppendEntry> = (0..n)
        .map(|k| crash_workload::entry(seed, RaftIndex(first.0 + k)))
        .collect();
    log.append(&entries)?;
    Ok(entries.iter().map(|e| e.body.len() as u64).sum())
}
