//! `RaftJournal`: the Raft state (term, vote, commit, members, compaction point) of every
//! group of one shard in one append-only file, `raft-journal-<shard>.log` in the data
//! directory. What one turn changes, for however many groups, is one append and one
//! fdatasync: thousands of groups electing at once (a topic created, a node restarted)
//! cost one write per turn instead of a file create, rename and two fsyncs per vote
//! (Redpanda keeps the same state in a per-shard key-value store for the same reason).
//!
//! Record: `[payload length: u32 LE][crc32c(payload): u32 LE][payload]`, the payload JSON
//! `{"g": group, "s": state or null}` (null: the group was removed here).
//!
//! Invariants: a group's state is its last intact record. Reading stops at the first torn
//! or corrupt record and truncates the file there: only a crash during an append leaves
//! one, and that append was never answered. Appends are serialized (each one's write and
//! fdatasync end before the next starts), so an answered append never follows a lost one.
//! When the file has grown past `REWRITE_BYTES_MIN` and `REWRITE_RATIO` times the live
//! states, an append rewrites it whole (temporary file, fdatasync, rename, directory fsync).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strand_raft::GroupId;
use strand_storage::io::AppendFile;

use crate::replication::store::StateFile;

/// Bytes of a record's header (length, crc).
const RECORD_HEADER_BYTES: usize = 8;
/// Largest record payload accepted when reading (a state is ~100 bytes; members are few).
const RECORD_PAYLOAD_BYTES_MAX: usize = 64 * 1024;
/// The file is rewritten only past this size...
const REWRITE_BYTES_MIN: u64 = 8 * 1024 * 1024;
/// ...and when it is this many times the size of the live states.
const REWRITE_RATIO: u64 = 4;

#[derive(Serialize, Deserialize)]
struct Record {
    g: u64,
    s: Option<StateFile>,
}

/// See the module doc.
pub struct RaftJournal {
    path: PathBuf,
    states: RefCell<HashMap<u64, StateFile>>,
    /// Tombstones to write with the next append.
    removed: RefCell<Vec<u64>>,
    file: RefCell<Option<AppendFile>>,
    /// Serializes appends (see the invariants).
    lock: futures::lock::Mutex<()>,
}

/// The journal file of `shard` in `data_dir`.
pub fn journal_path(data_dir: &Path, shard: usize) -> PathBuf {
    data_dir.join(format!("raft-journal-{shard}.log"))
}

fn encode(out: &mut Vec<u8>, record: &Record) -> anyhow::Result<()> {
    let payload = serde_json::to_vec(record)?;
    let len = u32::try_from(payload.len())?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// The states in `bytes` and the length of its intact prefix.
pub(crate) fn decode(bytes: &[u8]) -> (HashMap<u64, StateFile>, usize) {
    let mut states = HashMap::new();
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + RECORD_HEADER_BYTES) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len > RECORD_PAYLOAD_BYTES_MAX {
            break;
        }
        let start = at + RECORD_HEADER_BYTES;
        let Some(payload) = bytes.get(start..start + len) else {
            break;
        };
        if crc32c::crc32c(payload) != crc {
            break;
        }
        let Ok(record) = serde_json::from_slice::<Record>(payload) else {
            break;
        };
        match record.s {
            Some(s) => states.insert(record.g, s),
            None => states.remove(&record.g),
        };
        at = start + len;
    }
    (states, at)
}

impl RaftJournal {
    /// Opens the journal at `path` (creating it), dropping a torn tail.
    pub async fn open(path: PathBuf) -> anyhow::Result<RaftJournal> {
        let bytes = strand_storage::io::read_small_file(&path)
            .await?
            .unwrap_or_default();
        let (states, intact) = decode(&bytes);
        if intact < bytes.len() {
            tracing::warn!(path = %path.display(), intact, size = bytes.len(),
                "raft journal: dropping a torn or corrupt tail (a crash during an append)");
            strand_storage::io::truncate_file(&path, intact as u64).await?;
        }
        let file = AppendFile::open(&path).await?;
        Ok(RaftJournal {
            path,
            states: RefCell::new(states),
            removed: RefCell::new(Vec::new()),
            file: RefCell::new(Some(file)),
            lock: futures::lock::Mutex::new(()),
        })
    }

    /// The last state written for `group`.
    pub(crate) fn get(&self, group: GroupId) -> Option<StateFile> {
        self.states.borrow().get(&group.0).cloned()
    }

    /// Forgets `group` (its replica left this node); durable with the next append.
    pub fn remove(&self, group: GroupId) {
        if self.states.borrow_mut().remove(&group.0).is_some() {
            self.removed.borrow_mut().push(group.0);
        }
    }

    /// Makes `states` durable: one write and one fdatasync (or a rewrite of the file).
    pub(crate) async fn append(&self, states: Vec<(GroupId, StateFile)>) -> anyhow::Result<()> {
        let _serial = self.lock.lock().await;
        let mut bytes = Vec::new();
        for g in self.removed.take() {
            encode(&mut bytes, &Record { g, s: None })?;
        }
        for (g, s) in states {
            encode(
                &mut bytes,
                &Record {
                    g: g.0,
                    s: Some(s.clone()),
                },
            )?;
            self.states.borrow_mut().insert(g.0, s);
        }
        let len = self.file.borrow().as_ref().map_or(0, AppendFile::len);
        let live = (self.states.borrow().len() * 160) as u64;
        if len > REWRITE_BYTES_MIN && len > REWRITE_RATIO * live {
            return self.rewrite().await;
        }
        let file = self.file.borrow_mut().take();
        let Some(file) = file else {
            anyhow::bail!("{}: the journal failed before", self.path.display());
        };
        // A failed write leaves the file unknown: the journal stays failed (`file` None),
        // as a log does after a failed fdatasync.
        file.append_sync(&bytes).await?;
        *self.file.borrow_mut() = Some(file);
        Ok(())
    }

    /// Writes every live state to a new file that replaces this one.
    async fn rewrite(&self) -> anyhow::Result<()> {
        let mut bytes = Vec::new();
        let states: Vec<(u64, StateFile)> = self
            .states
            .borrow()
            .iter()
            .map(|(g, s)| (*g, s.clone()))
            .collect();
        for (g, s) in states {
            encode(&mut bytes, &Record { g, s: Some(s) })?;
        }
        let old = self.file.borrow_mut().take();
        if let Some(f) = old {
            f.close().await?;
        }
        strand_storage::io::write_small_file_atomic_async(&self.path, &bytes).await?;
        *self.file.borrow_mut() = Some(AppendFile::open(&self.path).await?);
        tracing::info!(path = %self.path.display(), bytes = bytes.len(), "raft journal rewritten");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(term: u64) -> StateFile {
        StateFile {
            term,
            vote: 1,
            voters: vec![1, 2, 3],
            ..StateFile::default()
        }
    }

    #[test]
    fn last_record_wins_removal_sticks_and_a_torn_tail_is_dropped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = journal_path(tmp.path(), 0);
        strand_storage::io_runtime::block_on("journal-test", 1, async {
            let j = RaftJournal::open(path.clone()).await.expect("open");
            j.append(vec![(GroupId(1), state(1)), (GroupId(2), state(1))])
                .await
                .expect("append");
            j.append(vec![(GroupId(1), state(2))])
                .await
                .expect("append");
            j.remove(GroupId(2));
            j.append(vec![(GroupId(3), state(5))])
                .await
                .expect("append");
        })
        .expect("executor");
        // A crash in the middle of an append: half a record at the end.
        let mut bytes = std::fs::read(&path).expect("read");
        let good = bytes.len();
        let mut torn = Vec::new();
        encode(
            &mut torn,
            &Record {
                g: 1,
                s: Some(state(9)),
            },
        )
        .expect("encode");
        bytes.extend_from_slice(&torn[..torn.len() / 2]);
        std::fs::write(&path, &bytes).expect("write");
        strand_storage::io_runtime::block_on("journal-test", 1, async {
            let j = RaftJournal::open(path.clone()).await.expect("reopen");
            assert_eq!(j.get(GroupId(1)).map(|s| s.term), Some(2));
            assert_eq!(j.get(GroupId(2)), None, "removed");
            assert_eq!(j.get(GroupId(3)).map(|s| s.term), Some(5));
            j.append(vec![(GroupId(4), state(1))])
                .await
                .expect("append after the cut");
        })
        .expect("executor");
        let (states, intact) = decode(&std::fs::read(&path).expect("read"));
        assert!(intact > good);
        assert_eq!(states.len(), 3);
    }

    #[test]
    fn rewrite_keeps_only_live_states() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = journal_path(tmp.path(), 0);
        strand_storage::io_runtime::block_on("journal-test", 1, async {
            let j = RaftJournal::open(path.clone()).await.expect("open");
            j.append(vec![(GroupId(7), state(1))])
                .await
                .expect("append");
            j.rewrite().await.expect("rewrite");
            j.append(vec![(GroupId(7), state(3))])
                .await
                .expect("append after");
        })
        .expect("executor");
        let (states, intact) = decode(&std::fs::read(&path).expect("read"));
        assert_eq!(states.get(&7).map(|s| s.term), Some(3));
        assert_eq!(
            intact,
            std::fs::metadata(&path).expect("stat").len() as usize
        );
    }
}
