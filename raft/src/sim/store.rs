//! `SimStore`: what the simulated world needs from a node's log store and its disk beyond
//! `LogStore`, so that one `World` drives either the in-memory `MemLogStore` (here) or the
//! broker's storage-backed store over a simulated disk (issue 24; raft/SIM-ON-STORAGE.md 2).
//!
//! A node owns one `Disk` for the whole run: it is what a crash leaves. Each incarnation
//! boots a `Node` from it (whatever the node's groups share) and opens one store per group.
//! A crash ends the incarnation: the stores and the `Node` are dropped, and the disk keeps
//! only what was durable (plus, if the store models it, part of the unsynced tail).
//!
//! A pipelined store (`pipelined`) persists as the broker's does (`DriverConfig::
//! async_persist`): after `MultiRaft::turn_begin` the world takes each dirty group's disk
//! work (`take_job`), runs one turn's jobs together a simulated latency later (`run_jobs`),
//! and at the node's next turn reports each result (`finish_job`, then
//! `MultiRaft::persisted`). A crash drops the jobs not run yet.
//!
//! Invariant (every implementation): the stores' random draws come only from the `Prng`
//! the world passes, so a run stays a pure function of its seed.
//!
//! Disk faults beyond a failed fdatasync (`inject`: crash points, a full disk, read errors)
//! are for stores over a simulated disk; the memory store models none. Deliberately absent
//! until the storage-backed store needs them: retention and removing a replica's data.

use bytes::Bytes;
use raft::eraftpb::Entry;

use crate::log_store::LogStore;
use crate::mem_store::{DurableImage, MemLogStore, SyncBehaviour};
use crate::seed::Prng;
use crate::types::{GroupId, NodeId, RaftIndex};

/// A fault of a simulated disk (`SimConfig::disk_faults`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    /// A crash (power loss) at the n-th next mutating operation, which is torn.
    CrashPoint(u64),
    /// Writes that would grow a file fail with ENOSPC until healed.
    Full,
    /// Some reads fail with EIO until healed.
    ReadErrors,
}

/// A log store the simulator can crash, restart and inspect. See the module doc.
pub trait SimStore: LogStore + Sized {
    /// One node's disk; survives the node's crashes.
    type Disk;
    /// What one incarnation of a node shares between its groups; dropped at a crash.
    type Node;
    /// Settings of the whole run, such as planted bugs.
    type Options: Clone;
    /// One group's disk work, taken after `turn_begin` (pipelined stores only).
    type Job;

    /// The command after `STRAND_SIM_SEED=<seed>` that replays a failed seed.
    const REPLAY: &'static str;

    /// Whether the world drives the stores pipelined (see the module doc); if not, it calls
    /// `MultiRaft::turn` and each `sync` persists at once.
    fn pipelined(options: &Self::Options) -> bool;

    /// A fresh disk for `node` holding every group of `groups` with an empty log whose
    /// first voters are `voters`; a node not among them joins each group as a learner.
    fn format(
        node: NodeId,
        groups: &[GroupId],
        voters: &[u64],
        options: &Self::Options,
    ) -> Self::Disk;

    /// Starts an incarnation on `disk`; an `Err` fails the seed.
    fn boot(disk: &mut Self::Disk, options: &Self::Options) -> Result<Self::Node, String>;

    /// Recovers the store of `group` from `disk` after `boot`; an `Err` fails the seed.
    fn open(
        disk: &mut Self::Disk,
        node: &mut Self::Node,
        group: GroupId,
        options: &Self::Options,
    ) -> Result<Self, String>;

    /// Crashes the incarnation `node`: `disk` keeps what survives of each group of
    /// `groups`, whose running store (if any) `live` gives; may draw from `rng`.
    fn crash<'a>(
        disk: &mut Self::Disk,
        node: Self::Node,
        groups: &[GroupId],
        live: impl Fn(GroupId) -> Option<&'a Self>,
        rng: &mut Prng,
    ) where
        Self: 'a;

    /// Whether entry `index` of `group` with `term` would survive a crash now (an index
    /// compacted away counts as held); `live` is the group's running store, if any.
    fn durable_holds(
        disk: &Self::Disk,
        live: Option<&Self>,
        group: GroupId,
        index: u64,
        term: u64,
    ) -> bool;

    /// Entries `lo..hi` for the checker: from memory, or from `disk` for entries the store
    /// keeps only there.
    fn read(&self, disk: &Self::Disk, lo: RaftIndex, hi: RaftIndex) -> Result<Vec<Entry>, String>;

    /// Makes the next sync of `store` fail (an fdatasync error), so the group is fenced.
    fn fail_next_sync(disk: &mut Self::Disk, store: &mut Self);

    /// Takes the disk work staged since the last job; `None` when nothing is staged.
    fn take_job(&mut self) -> Option<Self::Job>;

    /// Runs one turn's jobs on `disk`; returns each job's group and result, in any order.
    fn run_jobs(
        disk: &mut Self::Disk,
        node: &mut Self::Node,
        jobs: Vec<(GroupId, Self::Job)>,
    ) -> Vec<(GroupId, Result<(), String>)>;

    /// How this store's job ended; after an `Err` the store's next `sync` must fail.
    fn finish_job(&mut self, result: Result<(), String>);

    /// Reads the entries of `ranges` from `disk` for raft-rs's asynchronous read path
    /// (`MultiRaft::wanted_reads`), to be served by `entries` until `fetched_done`. A store
    /// whose entries are all in memory never has reads wanted.
    fn fetch(&mut self, _disk: &mut Self::Disk, _ranges: &[(RaftIndex, RaftIndex)]) {}

    /// The driver took the fetched entries (`MultiRaft::entries_fetched` returned).
    fn fetched_done(&mut self) {}

    /// Where retention would compact this store now (the end of a closed segment at or
    /// before `applied`), drawn with `rng`; `None` when nothing is due.
    fn retention_point(&self, _applied: RaftIndex, _rng: &mut Prng) -> Option<RaftIndex> {
        None
    }

    /// Injects `fault` into `disk`; false when the store models no such fault.
    fn inject(_disk: &mut Self::Disk, _fault: DiskFault) -> bool {
        false
    }

    /// Whether a crash point fired on `disk`: the node must crash now.
    fn crashed(_disk: &Self::Disk) -> bool {
        false
    }

    /// Whether a fault is injected in `disk` now (a recovery failing meanwhile is retried).
    fn faulty(_disk: &Self::Disk) -> bool {
        false
    }

    /// Ends the full disk and the read errors injected in `disk`; `for_good` (the end of
    /// the fault phase) also disarms a crash point not reached yet, which otherwise stays
    /// (it fires later, or the node's next crash disarms it).
    fn heal(_disk: &mut Self::Disk, _for_good: bool) {}

    /// The entry data the client proposes for `payload` claiming `records` records.
    fn wrap_payload(payload: Bytes, records: u32) -> Bytes;

    /// `entry` with what the store may rewrite in it after the proposal (a batch's base
    /// offset, its leader epoch) reset, so that copies of one entry compare equal.
    fn canonical(entry: Entry) -> Entry;
}

/// Most unsynced entries a crash may leave behind (a partly written tail).
const TORN_ENTRIES_MAX: u64 = 3;

/// How the simulator runs `MemLogStore`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemOptions {
    /// `LiesAboutSync` plants a bug the checker must catch.
    pub sync_behaviour: SyncBehaviour,
    /// Pipelined persistence (`SimStore::pipelined`): a group's job only marks the wait
    /// for its disk work, and `sync` (at `MultiRaft::persisted`) persists.
    pub pipelined: bool,
}

/// The in-memory store: its disk is the crashed groups' images. While a node runs, the
/// images live in its stores (as their durable part) and the disk is empty.
impl SimStore for MemLogStore {
    type Disk = std::collections::BTreeMap<GroupId, DurableImage>;
    type Node = ();
    type Options = MemOptions;
    type Job = ();

    const REPLAY: &'static str = "cargo test -p strand-raft --test sim";

    fn pipelined(options: &MemOptions) -> bool {
        options.pipelined
    }

    fn format(node: NodeId, groups: &[GroupId], voters: &[u64], _: &MemOptions) -> Self::Disk {
        let image = if voters.contains(&node.0) {
            DurableImage::new(voters)
        } else {
            DurableImage::joining(voters, node.0)
        };
        groups.iter().map(|&g| (g, image.clone())).collect()
    }

    fn boot(_: &mut Self::Disk, _: &MemOptions) -> Result<(), String> {
        Ok(())
    }

    fn open(
        disk: &mut Self::Disk,
        _: &mut (),
        group: GroupId,
        options: &MemOptions,
    ) -> Result<Self, String> {
        let image = disk
            .remove(&group)
            .ok_or_else(|| format!("no image of {group} on the disk"))?;
        MemLogStore::recover(image, options.sync_behaviour).map_err(|e| e.to_string())
    }

    fn crash<'a>(
        disk: &mut Self::Disk,
        _: (),
        groups: &[GroupId],
        live: impl Fn(GroupId) -> Option<&'a Self>,
        rng: &mut Prng,
    ) {
        for &g in groups {
            let torn = usize::try_from(rng.below(TORN_ENTRIES_MAX + 1)).unwrap_or(0);
            let image = live(g).map(|s| s.crash_image(torn)).unwrap_or_default();
            disk.insert(g, image);
        }
    }

    fn durable_holds(
        disk: &Self::Disk,
        live: Option<&Self>,
        group: GroupId,
        index: u64,
        term: u64,
    ) -> bool {
        match live {
            Some(s) => s.durable_holds(index, term),
            None => disk.get(&group).is_some_and(|im| im.holds(index, term)),
        }
    }

    fn read(&self, _: &Self::Disk, lo: RaftIndex, hi: RaftIndex) -> Result<Vec<Entry>, String> {
        self.entries(lo, hi, None).map_err(|e| e.to_string())
    }

    fn fail_next_sync(_: &mut Self::Disk, store: &mut Self) {
        store.fail_next_sync();
    }

    // The world takes a job only from a group with unsynced changes.
    fn take_job(&mut self) -> Option<()> {
        Some(())
    }

    fn run_jobs(
        _: &mut Self::Disk,
        _: &mut (),
        jobs: Vec<(GroupId, ())>,
    ) -> Vec<(GroupId, Result<(), String>)> {
        jobs.into_iter().map(|(g, ())| (g, Ok(()))).collect()
    }

    // A failure comes from `sync` itself (`fail_next_sync`).
    fn finish_job(&mut self, _: Result<(), String>) {}

    fn wrap_payload(payload: Bytes, _: u32) -> Bytes {
        payload
    }

    fn canonical(entry: Entry) -> Entry {
        entry
    }
}
