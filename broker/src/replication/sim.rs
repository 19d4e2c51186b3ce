//! The deterministic simulator (`strand_raft::sim`) over the broker's real Raft log store:
//! `RaftLogStore` on `strand_storage::Log` on a simulated disk (`strand_storage::io_sim`),
//! with the shard's `RaftJournal` holding each group's state (issue 24;
//! raft/SIM-ON-STORAGE.md, step 3). Only built with the `sim` feature.
//!
//! Invariant: every call that can reach the storage engine runs with the node's disk
//! entered, so no glommio call is ever made (one would panic: no executor) and every I/O
//! completes at once under `io_sim::block_on`. The durable view the checker trusts is parsed
//! from the disk's durable image (journal and segment frames), never from the store's own
//! claims, so a store that acknowledges before its data is durable is caught.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use raft::eraftpb::Entry;
use strand_raft::seed::Prng;
use strand_raft::sim::{DiskFault, SimStore};
use strand_raft::{GroupId, LogStore, NodeId, RaftIndex};
use strand_storage::io_sim::{block_on, DiskFaults, DiskOptions, SimDisk};
use strand_storage::{BatchCache, Clock, Log, LogConfig};

use super::journal::{self, RaftJournal};
use super::store::{entry_of, PersistJob, RaftLogStore};
use crate::partition::Partition;

/// The data directory on every simulated disk.
const DATA_DIR: &str = "/data";
/// Batch cache per node: small, so that reads miss and go to the disk.
const SIM_CACHE_BYTES: usize = 64 * 1024;
/// Bytes added to each proposed payload.
const PAYLOAD_PADDING_BYTES: usize = 600;
/// Reads failing while `DiskFault::ReadErrors` lasts, per thousand.
const READ_ERROR_PER_MILLE: u32 = 200;
/// Wall-clock milliseconds the logs see (time-based rolling and retention never fire).
const SIM_WALL_MS: i64 = 1_700_000_000_000;

/// Segments roll and finalize often; retention by size is left to the schedules.
fn sim_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: strand_storage::config::SEGMENT_BYTES_MIN,
        retention_ms: -1,
        retention_bytes: -1,
        preallocate_bytes: 64 * 1024,
        allow_buffered_io: true,
        ..LogConfig::default()
    }
}

/// Settings of one run.
#[derive(Clone, Debug, Default)]
pub struct BrokerSimOptions {
    /// Seeds the disks' own randomness (torn writes, listing order).
    pub seed: u64,
    /// Planted bugs (`io_sim::planted`), which the checker must catch.
    pub planted: BTreeSet<&'static str>,
}

/// One node's disk, and what the node is in each group.
pub struct BrokerDisk {
    node: NodeId,
    disk: SimDisk,
    voters: Vec<u64>,
    learners: Vec<u64>,
    /// Durable views by group, valid while the disk's durable generation is unchanged.
    views: RefCell<BTreeMap<GroupId, (u64, DurableLog)>>,
}

/// One incarnation of a node: its journal and its batch cache.
pub struct BrokerNode {
    journal: Rc<RaftJournal>,
    cache: Rc<BatchCache>,
}

struct FixedClock;
impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        SIM_WALL_MS
    }
}

fn journal_path() -> PathBuf {
    journal::journal_path(Path::new(DATA_DIR), 0)
}

fn group_dir(g: GroupId) -> PathBuf {
    Path::new(DATA_DIR).join(format!("t-{}", g.0))
}

/// What a crash now would leave of one group: its compaction point and the terms of the
/// entries of its durable, continuous log.
#[derive(Clone, Debug, Default)]
struct DurableLog {
    compacted_through: u64,
    terms: BTreeMap<u64, u64>,
}

impl DurableLog {
    fn holds(&self, index: u64, term: u64) -> bool {
        index <= self.compacted_through || self.terms.get(&index) == Some(&term)
    }
}

/// Parses the durable image of group `g` as recovery would read it: the journal's state for
/// the compaction point, then the segments' frames in order until the first bad frame or
/// a break in the indexes.
fn durable_log(disk: &SimDisk, g: GroupId) -> DurableLog {
    let mut out = DurableLog::default();
    if let Some(bytes) = disk.durable_bytes(&journal_path()) {
        let (states, _) = journal::decode(&bytes);
        if let Some(c) = states.get(&g.0).and_then(|s| s.compacted) {
            out.compacted_through = c.index();
        }
    }
    let mut segments: Vec<PathBuf> = disk
        .durable_list(&group_dir(g))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let mut next: Option<u64> = None;
    for path in segments {
        let Some(bytes) = disk.durable_bytes(&path) else {
            break;
        };
        let mut broken = false;
        let stop = strand_storage::frame::scan(&bytes, |f, body| {
            let h = f.header;
            if broken || next.is_some_and(|n| n != h.index.0) {
                broken = true;
                return;
            }
            let e = entry_of(&h, &Bytes::copy_from_slice(body));
            out.terms.insert(e.index, e.term);
            next = Some(h.index.0 + 1);
        });
        if broken || stop != strand_storage::frame::ScanStop::Clean {
            break;
        }
    }
    out
}

impl BrokerDisk {
    fn view(&self, g: GroupId) -> DurableLog {
        let generation = self.disk.durable_generation();
        if let Some((at, v)) = self.views.borrow().get(&g) {
            if *at == generation {
                return v.clone();
            }
        }
        let v = self.disk.without_faults(|| durable_log(&self.disk, g));
        self.views.borrow_mut().insert(g, (generation, v.clone()));
        v
    }
}

impl SimStore for RaftLogStore {
    type Disk = BrokerDisk;
    type Node = BrokerNode;
    type Options = BrokerSimOptions;
    type Job = PersistJob;

    const REPLAY: &'static str = "cargo test -p strand-broker --test sim_storage";

    fn pipelined(_: &BrokerSimOptions) -> bool {
        true
    }

    fn format(node: NodeId, _: &[GroupId], voters: &[u64], o: &BrokerSimOptions) -> BrokerDisk {
        let joining = !voters.contains(&node.0);
        BrokerDisk {
            node,
            disk: SimDisk::new(
                o.seed ^ node.0.wrapping_mul(0x9e37_79b9),
                DiskOptions {
                    planted: o.planted.clone(),
                    // The node's groups' flushes overlap and share device flushes.
                    slow_syncs: true,
                },
            ),
            voters: voters.to_vec(),
            learners: if joining { vec![node.0] } else { Vec::new() },
            views: RefCell::new(BTreeMap::new()),
        }
    }

    fn boot(disk: &mut BrokerDisk, _: &BrokerSimOptions) -> Result<BrokerNode, String> {
        // A crash point that fired during the last recovery: the power comes back.
        if disk.disk.crashed() {
            disk.disk.crash();
        }
        let _entered = disk.disk.enter();
        let journal = block_on(async {
            strand_storage::io::create_dir_all(Path::new(DATA_DIR)).await?;
            RaftJournal::open(journal_path()).await
        })
        .map_err(|e| format!("journal: {e}"))?;
        Ok(BrokerNode {
            journal: Rc::new(journal),
            cache: Rc::new(BatchCache::new(SIM_CACHE_BYTES)),
        })
    }

    fn open(
        disk: &mut BrokerDisk,
        node: &mut BrokerNode,
        g: GroupId,
        _: &BrokerSimOptions,
    ) -> Result<Self, String> {
        let _entered = disk.disk.enter();
        let _span = tracing::info_span!("sim", node = disk.node.0).entered();
        let saved = node.journal.get(g);
        let (voters, learners) = (disk.voters.clone(), disk.learners.clone());
        let cache = node.cache.clone();
        block_on(async move {
            let log = Log::open(&group_dir(g), sim_log_config(), Rc::new(FixedClock), cache)
                .await
                .map_err(|e| format!("log of {g}: {e}"))?;
            let metrics = Rc::new(crate::common::metrics::ShardMetrics::new(1));
            let part = Rc::new(Partition::new(
                format!("t{}", g.0),
                0,
                log,
                1 << 20,
                metrics,
            ));
            RaftLogStore::open(part, &voters, &learners, saved)
                .await
                .map_err(|e| format!("store of {g}: {e:#}"))
        })
    }

    fn crash<'a>(
        disk: &mut BrokerDisk,
        node: BrokerNode,
        _: &[GroupId],
        _: impl Fn(GroupId) -> Option<&'a Self>,
        rng: &mut Prng,
    ) {
        drop(node);
        // A one-shot fault not yet hit ends with the incarnation (recovery must not trip
        // on a fault meant for the running node).
        disk.disk.set_faults(DiskFaults::default());
        disk.disk.reseed(rng.next_u64());
        disk.disk.crash();
    }

    fn durable_holds(
        disk: &BrokerDisk,
        _live: Option<&Self>,
        g: GroupId,
        index: u64,
        term: u64,
    ) -> bool {
        disk.view(g).holds(index, term)
    }

    fn read(&self, disk: &BrokerDisk, lo: RaftIndex, hi: RaftIndex) -> Result<Vec<Entry>, String> {
        if let Ok(entries) = self.entries(lo, hi, None) {
            return Ok(entries);
        }
        // Applied entries from the log, the rest (perhaps not on disk yet) from memory.
        let split = RaftIndex(self.mem_first().clamp(lo.0, hi.0));
        let _entered = disk.disk.enter();
        let log = self.partition().log();
        let frames = disk.disk.without_faults(|| {
            block_on(log.read_entries(
                strand_storage::RaftIndex(lo.0),
                strand_storage::RaftIndex(split.0),
                usize::MAX,
            ))
        });
        let frames = frames.map_err(|e| format!("read {}..{}: {e}", lo.0, split.0))?;
        let mut out: Vec<Entry> = frames
            .iter()
            .map(|f| entry_of(&f.header, &f.body))
            .collect();
        out.extend(self.entries(split, hi, None).map_err(|e| e.to_string())?);
        Ok(out)
    }

    fn fail_next_sync(disk: &mut BrokerDisk, _: &mut Self) {
        disk.disk.set_faults(DiskFaults {
            fail_syncs: 1,
            ..disk.disk.faults()
        });
    }

    fn take_job(&mut self) -> Option<PersistJob> {
        RaftLogStore::take_job(self)
    }

    /// As `Replicator::turn` and the tasks it spawns: the shipped states first, then one
    /// journal append for every job's state, which each job's log work runs beside.
    fn run_jobs(
        disk: &mut BrokerDisk,
        node: &mut BrokerNode,
        jobs: Vec<(GroupId, PersistJob)>,
    ) -> Vec<(GroupId, Result<(), String>)> {
        let _entered = disk.disk.enter();
        let _span = tracing::info_span!("sim", node = disk.node.0).entered();
        let mut jobs = jobs;
        let state_written = super::write_states(&node.journal, &mut jobs);
        block_on(futures::future::join_all(jobs.into_iter().map(
            |(g, job)| {
                let state_written = state_written.clone();
                async move { (g, job.run(state_written).await) }
            },
        )))
    }

    fn finish_job(&mut self, result: Result<(), String>) {
        RaftLogStore::finish_job(self, result);
    }

    fn fetch(&mut self, disk: &mut BrokerDisk, ranges: &[(RaftIndex, RaftIndex)]) {
        let _entered = disk.disk.enter();
        let mut frames = Vec::new();
        for &(lo, hi) in ranges {
            let read = block_on(self.partition().log().read_entries(
                strand_storage::RaftIndex(lo.0),
                strand_storage::RaftIndex(hi.0),
                strand_raft::multi_raft::APPEND_BYTES_MAX_DEFAULT as usize,
            ));
            match read {
                Ok(f) => frames.extend(f),
                Err(e) => tracing::debug!(error = %e, "simulated raft log read failed"),
            }
        }
        self.load_fetched(frames);
    }

    fn fetched_done(&mut self) {
        self.clear_fetched();
    }

    /// The end of a random closed segment after the compaction point and at or before
    /// `applied` (retention deletes whole segments).
    fn retention_point(&self, applied: RaftIndex, rng: &mut Prng) -> Option<RaftIndex> {
        let point = LogStore::index(self).compaction_point().index.0;
        let names = self.partition().log().segment_names();
        let ends: Vec<u64> = names
            .windows(2)
            .map(|w| w[1].raft_base_index.0.saturating_sub(1))
            .filter(|&end| end > point && end <= applied.0)
            .collect();
        if ends.is_empty() {
            return None;
        }
        let pick = usize::try_from(rng.below(ends.len() as u64)).ok()?;
        ends.get(pick).map(|&end| RaftIndex(end))
    }

    fn inject(disk: &mut BrokerDisk, fault: DiskFault) -> bool {
        tracing::info!(node = disk.node.0, ?fault, "simulated disk fault injected");
        let d = &disk.disk;
        match fault {
            DiskFault::CrashPoint(ops) => d.crash_after_ops(ops),
            DiskFault::Full => d.set_faults(DiskFaults {
                full: true,
                ..d.faults()
            }),
            DiskFault::ReadErrors => d.set_faults(DiskFaults {
                read_error_per_mille: READ_ERROR_PER_MILLE,
                ..d.faults()
            }),
        }
        true
    }

    fn crashed(disk: &BrokerDisk) -> bool {
        disk.disk.crashed()
    }

    fn faulty(disk: &BrokerDisk) -> bool {
        disk.disk.faults() != DiskFaults::default() || disk.disk.armed() || disk.disk.crashed()
    }

    fn heal(disk: &mut BrokerDisk, for_good: bool) {
        disk.disk.set_faults(DiskFaults::default());
        if for_good {
            disk.disk.disarm();
        }
    }

    /// A Kafka batch of `records` records, the first holding `payload` and padding (so
    /// that segments fill, roll and are deleted by retention within a run).
    fn wrap_payload(payload: Bytes, records: u32) -> Bytes {
        let mut value = payload.to_vec();
        value.resize(payload.len() + PAYLOAD_PADDING_BYTES, 0x5a);
        let mut b = strand_wire::BatchBuilder::new(0);
        b.push(0, None, Some(&value), &[]);
        for i in 1..i64::from(records) {
            b.push(i, None, None, &[]);
        }
        b.build()
    }

    /// Base offset and leader epoch zeroed: the log stamps them.
    fn canonical(mut entry: Entry) -> Entry {
        let data = matches!(
            strand_raft::entry::classify(&entry),
            Ok(strand_raft::entry::EntryKind::Data { .. })
        );
        if data && entry.data.len() >= 16 {
            let mut b = entry.data.to_vec();
            b[..8].fill(0);
            b[12..16].fill(0);
            entry.data = Bytes::from(b);
        }
        entry
    }
}
