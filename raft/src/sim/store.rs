//! `SimStore`: what the simulated world needs from a node's log store and its disk beyond
//! `LogStore`, so that one `World` drives either the in-memory `MemLogStore` (here) or the
//! broker's storage-backed store over a simulated disk (issue 24; raft/SIM-ON-STORAGE.md 2).
//!
//! A node owns one `Disk` for the whole run: it is what a crash leaves. Each incarnation
//! boots a `Node` from it (whatever the node's groups share) and opens one store per group.
//! A crash ends the incarnation: the stores and the `Node` are dropped, and the disk keeps
//! only what was durable (plus, if the store models it, part of the unsynced tail).
//!
//! Invariant (every implementation): the stores' random draws come only from the `Prng`
//! the world passes, so a run stays a pure function of its seed.
//!
//! Deliberately absent until the storage-backed store needs them: pipelined persistence
//! (`DriverConfig::async_persist`), asynchronous reads, retention, disk faults other than a
//! failed fdatasync, crash points, and removing a replica's data.

use bytes::Bytes;
use raft::eraftpb::Entry;

use crate::log_store::LogStore;
use crate::mem_store::{DurableImage, MemLogStore, SyncBehaviour};
use crate::seed::Prng;
use crate::types::{GroupId, NodeId, RaftIndex};

/// A log store the simulator can crash, restart and inspect. See the module doc.
pub trait SimStore: LogStore + Sized {
    /// One node's disk; survives the node's crashes.
    type Disk;
    /// What one incarnation of a node shares between its groups; dropped at a crash.
    type Node;
    /// Settings of the whole run, such as planted bugs.
    type Options: Clone;

    /// The command after `STRAND_SIM_SEED=<seed>` that replays a failed seed.
    const REPLAY: &'static str;

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

    /// The entry data the client proposes for `payload` claiming `records` records.
    fn wrap_payload(payload: Bytes, records: u32) -> Bytes;

    /// `entry` with what the store may rewrite in it after the proposal (a batch's base
    /// offset, its leader epoch) reset, so that copies of one entry compare equal.
    fn canonical(entry: Entry) -> Entry;
}

/// Most unsynced entries a crash may leave behind (a partly written tail).
const TORN_ENTRIES_MAX: u64 = 3;

/// The in-memory store: its disk is the crashed groups' images. While a node runs, the
/// images live in its stores (as their durable part) and the disk is empty.
impl SimStore for MemLogStore {
    type Disk = std::collections::BTreeMap<GroupId, DurableImage>;
    type Node = ();
    type Options = SyncBehaviour;

    const REPLAY: &'static str = "cargo test -p strand-raft --test sim";

    fn format(node: NodeId, groups: &[GroupId], voters: &[u64], _: &SyncBehaviour) -> Self::Disk {
        let image = if voters.contains(&node.0) {
            DurableImage::new(voters)
        } else {
            DurableImage::joining(voters, node.0)
        };
        groups.iter().map(|&g| (g, image.clone())).collect()
    }

    fn boot(_: &mut Self::Disk, _: &SyncBehaviour) -> Result<(), String> {
        Ok(())
    }

    fn open(
        disk: &mut Self::Disk,
        _: &mut (),
        group: GroupId,
        behaviour: &SyncBehaviour,
    ) -> Result<Self, String> {
        let image = disk
            .remove(&group)
            .ok_or_else(|| format!("no image of {group} on the disk"))?;
        MemLogStore::recover(image, *behaviour).map_err(|e| e.to_string())
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

    fn wrap_payload(payload: Bytes, _: u32) -> Bytes {
        payload
    }

    fn canonical(entry: Entry) -> Entry {
        entry
    }
}
