//! The simulated cluster: nodes (a disk each, and while up a `MultiRaft` over stores of
//! any `SimStore`), the network, a client, the fault injector, and the event loop that
//! drives them on simulated time. Every step is followed by the checker on the node it
//! touched.
//!
//! Invariant: the run is a pure function of the seed: one `Prng` feeds every random choice
//! (each node's election jitter is forked from it), events at equal times are taken in a
//! fixed order, and all maps are ordered.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::Clock;
use crate::entry;
use crate::multi_raft::{Completion, DriverConfig, MultiRaft, ProposalId};
use crate::seed::Prng;
use crate::types::{GroupId, NodeId};

use super::checker::{Checker, GroupView};
use super::network::{Network, NetworkFaults, SimTransport};
use super::store::{DiskFault, SimStore};
use super::{SimConfig, SimFailure};

/// How often an idle node runs a loop turn (the driver ticks every 100 ms within them).
const TURN_PERIOD: Duration = Duration::from_millis(10);
/// Gap between client proposals, in milliseconds.
const CLIENT_GAP_MS: (u64, u64) = (3, 30);
/// Chance (per mille) that the client then pauses for `CLIENT_QUIET_MS`, long enough for
/// every group to hibernate (faults keep landing meanwhile).
const CLIENT_QUIET_PER_MILLE: u32 = 8;
const CLIENT_QUIET_MS: (u64, u64) = (1500, 4000);
/// Gap between injected faults, in milliseconds.
const FAULT_GAP_MS: (u64, u64) = (200, 1500);
/// How long a crashed node stays down, in milliseconds.
const DOWN_MS: (u64, u64) = (100, 3000);
/// Chance (per mille) that a fault event also injects a disk fault (`SimConfig::disk_faults`).
const DISK_FAULT_PER_MILLE: u32 = 300;
/// How long a full disk or a run of read errors lasts, in milliseconds.
const DISK_FAULT_MS: (u64, u64) = (300, 2000);
/// Gap between retention runs (`SimConfig::compaction`), in milliseconds.
const RETENTION_GAP_MS: (u64, u64) = (300, 1500);
/// A crash point falls on one of this many next mutating disk operations.
const CRASH_POINT_OPS_MAX: u64 = 40;
/// How long a partition lasts, in milliseconds.
const PARTITION_MS: (u64, u64) = (300, 4000);
/// Most records a simulated batch claims.
const RECORDS_PER_BATCH_MAX: u64 = 4;
/// Gap between new move targets (`SimConfig::moves`), in milliseconds.
const MOVE_GAP_MS: (u64, u64) = (300, 2500);
/// How long a turn's disk work takes (a pipelined store), in microseconds: a write and an
/// fdatasync on a fast SSD.
const PERSIST_US: (u64, u64) = (100, 3000);
/// Chance (per mille) that a turn's disk work is slow instead (`SLOW_PERSIST_US`): an
/// fdatasync stuck behind the device's cache flush, which holds up that work's groups only.
const SLOW_PERSIST_PER_MILLE: u32 = 50;
const SLOW_PERSIST_US: (u64, u64) = (50_000, 400_000);
/// When a pipelined node's driver has more work after a turn, the next turn comes this
/// soon, in microseconds (the broker's loop runs again at once).
const READY_AGAIN_US: (u64, u64) = (200, 1000);

/// Simulated time, shared by the world and every driver.
#[derive(Clone, Debug, Default)]
pub struct SimClock(Rc<Cell<Duration>>);

impl SimClock {
    fn set(&self, now: Duration) {
        assert!(now >= self.0.get(), "simulated time went back");
        self.0.set(now);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.0.get()
    }
}

pub(crate) type Driver<S> = MultiRaft<S, SimTransport, SimClock>;

pub(crate) struct SimNode<S: SimStore> {
    pub id: NodeId,
    // Invariant: `driver` and `inc` are both present (the node is up) or both absent.
    pub driver: Option<Driver<S>>,
    inc: Option<Incarnation<S>>,
    /// What survives the node's crashes.
    disk: S::Disk,
    incarnation: u64,
    next_turn: Duration,
    /// When the node (re)starts: restarted at once if it is up (an operator restart).
    restart_at: Option<Duration>,
    /// When the disk's injected fault (full, read errors) ends.
    disk_heal_at: Option<Duration>,
}

/// One turn's disk work: each dirty group's job.
type JobBatch<S> = Vec<(GroupId, <S as SimStore>::Job)>;

/// A running node's state beside its driver, dropped at a crash.
struct Incarnation<S: SimStore> {
    rt: S::Node,
    /// Groups whose disk work runs (a pipelined store): they begin no `Ready` until the
    /// work is reported done (`MultiRaft::turn_begin`).
    persisting: BTreeSet<GroupId>,
    /// Each turn's disk work, by when it ends (then a sequence number).
    jobs: BTreeMap<(Duration, u64), JobBatch<S>>,
    /// Results of finished disk work, reported to the stores at the next turn.
    done: Vec<(GroupId, Result<(), String>)>,
    /// Compactions retention asked for, applied at the next turn to groups not persisting
    /// (the broker's `apply_compactions`).
    compactions: Vec<(GroupId, crate::RaftIndex)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Deliver,
    Turn(usize),
    Restart(usize),
    PersistDone(usize),
    DiskHeal(usize),
    Retention,
    Heal,
    Client,
    Fault,
    Move,
}

/// A proposal the client waits for.
struct InFlight {
    group: GroupId,
    payload: Bytes,
}

pub(crate) struct World<S: SimStore> {
    pub seed: u64,
    config: SimConfig,
    options: S::Options,
    /// `SimStore::pipelined`: turns are split around the disk work.
    pipelined: bool,
    next_job_seq: u64,
    pub clock: SimClock,
    pub rng: Prng,
    pub nodes: Vec<SimNode<S>>,
    network: Network,
    pub checker: Checker,
    groups: Vec<GroupId>,
    in_flight: BTreeMap<(usize, u64, ProposalId), InFlight>,
    leader_guess: BTreeMap<GroupId, usize>,
    next_payload: u64,
    next_client: Option<Duration>,
    next_fault: Option<Duration>,
    next_retention: Option<Duration>,
    heal_at: Option<Duration>,
    /// Groups moving, with their target voters (`SimConfig::moves`).
    targets: BTreeMap<GroupId, Vec<NodeId>>,
    next_move: Option<Duration>,
    /// Moves whose leader reported them done.
    pub moves_finished: usize,
    pub step: u64,
    pub digest: u64,
    completions: Vec<Completion>,
}

impl<S: SimStore> World<S> {
    pub fn new(seed: u64, config: SimConfig, options: S::Options) -> Result<Self, SimFailure> {
        let mut rng = Prng::new(seed);
        let clock = SimClock::default();
        let voters: Vec<u64> = (1..=config.voters.min(config.nodes)).collect();
        let groups: Vec<GroupId> = (1..=config.groups).map(GroupId).collect();
        let mut nodes = Vec::new();
        for v in 1..=config.nodes {
            let disk = S::format(NodeId(v), &groups, &voters, &options);
            let next_turn = Duration::from_millis(rng.below(10));
            nodes.push(SimNode {
                id: NodeId(v),
                driver: None,
                inc: None,
                disk,
                incarnation: 0,
                next_turn,
                restart_at: None,
                disk_heal_at: None,
            });
        }
        let next_move = config_moves_at(&config, &mut rng);
        let mut world = Self {
            seed,
            network: Network::new(config.network.clone()),
            next_client: Some(Duration::from_millis(
                rng.range(CLIENT_GAP_MS.0, CLIENT_GAP_MS.1),
            )),
            next_fault: config
                .faults
                .then(|| Duration::from_millis(rng.range(FAULT_GAP_MS.0, FAULT_GAP_MS.1))),
            next_retention: config
                .compaction
                .then(|| Duration::from_millis(rng.range(RETENTION_GAP_MS.0, RETENTION_GAP_MS.1))),
            config,
            pipelined: S::pipelined(&options),
            next_job_seq: 0,
            options,
            clock,
            rng,
            nodes,
            checker: Checker::default(),
            groups,
            in_flight: BTreeMap::new(),
            leader_guess: BTreeMap::new(),
            next_payload: 0,
            heal_at: None,
            targets: BTreeMap::new(),
            next_move,
            moves_finished: 0,
            step: 0,
            digest: 0xcbf2_9ce4_8422_2325,
            completions: Vec::new(),
        };
        for i in 0..world.nodes.len() {
            world.start(i)?;
        }
        Ok(world)
    }

    pub fn now(&self) -> Duration {
        self.clock.now()
    }

    pub fn fail(&self, what: impl Into<String>) -> SimFailure {
        SimFailure {
            seed: self.seed,
            step: self.step,
            at: self.now(),
            what: what.into(),
            replay: S::REPLAY,
        }
    }

    fn start(&mut self, i: usize) -> Result<(), SimFailure> {
        let jitter_seed = self.rng.next_u64();
        let node = &mut self.nodes[i];
        let mut config = DriverConfig::new(node.id, jitter_seed);
        config.async_persist = self.pipelined;
        config.sync_min_interval = self.config.sync_min_interval;
        let mut driver = MultiRaft::new(config, self.clock.clone(), SimTransport::default());
        let opened = open_groups(node, &mut driver, &self.groups, &self.options);
        let rt = opened.map_err(|what| self.fail(what))?;
        let node = &mut self.nodes[i];
        tracing::info!(
            node = node.id.0,
            at_ms = self.clock.now().as_millis() as u64,
            "sim: node started"
        );
        node.driver = Some(driver);
        node.inc = Some(Incarnation {
            rt,
            persisting: BTreeSet::new(),
            jobs: BTreeMap::new(),
            done: Vec::new(),
            compactions: Vec::new(),
        });
        node.incarnation += 1;
        node.next_turn = self.clock.now() + TURN_PERIOD;
        Ok(())
    }

    /// Crashes node `i`: its unsynced writes vanish (but a torn tail may survive).
    pub fn crash(&mut self, i: usize) -> Result<(), SimFailure> {
        let node = &mut self.nodes[i];
        let Some(driver) = node.driver.take() else {
            return Ok(());
        };
        tracing::info!(
            node = node.id.0,
            at_ms = self.clock.now().as_millis() as u64,
            "sim: node crashed"
        );
        let inc = node
            .inc
            .take()
            .expect("a node that is up has its incarnation");
        // Disk work not run yet never happens (nothing waited on it was acknowledged).
        drop(inc.jobs);
        S::crash(
            &mut node.disk,
            inc.rt,
            &self.groups,
            |g| driver.store(g),
            &mut self.rng,
        );
        self.in_flight.retain(|&(n, _, _), _| n != i);
        self.checker.forget_node(self.nodes[i].id);
        if self.config.check_durable {
            self.check_durable()?;
        }
        Ok(())
    }

    /// Whether node `k`'s disk holds raft index `index` of `g` with `term` (durably).
    fn holds(&self, k: usize, g: GroupId, index: u64, term: u64) -> bool {
        let n = &self.nodes[k];
        let live = n.driver.as_ref().and_then(|d| d.store(g));
        S::durable_holds(&n.disk, live, g, index, term)
    }

    /// An acknowledged entry is already durable on a majority.
    fn check_acked_durable(&self, payload: &Bytes) -> Result<(), SimFailure> {
        let Some((g, index, term)) = self.checker.committed_entry(payload) else {
            return Err(self.fail("acknowledged entry not in the committed log"));
        };
        let holders = (0..self.nodes.len())
            .filter(|&k| self.holds(k, g, index.0, term))
            .count();
        if holders < self.quorum() {
            return Err(self.fail(format!(
                "lost write: {g} acknowledged raft index {} while durable on {holders} of {} nodes",
                index.0,
                self.nodes.len()
            )));
        }
        Ok(())
    }

    /// No committed entry is lost: each is durable on a majority of the nodes.
    pub fn check_durable(&self) -> Result<(), SimFailure> {
        for &g in &self.groups {
            let holds = |k, index, term| self.holds(k, g, index, term);
            self.checker
                .check_durable(g, holds, self.nodes.len(), self.quorum())
                .map_err(|e| self.fail(e))?;
        }
        Ok(())
    }
}

/// Boots `node`'s incarnation and adds every group of `groups`, recovered from its disk,
/// to `driver`.
fn open_groups<S: SimStore>(
    node: &mut SimNode<S>,
    driver: &mut Driver<S>,
    groups: &[GroupId],
    options: &S::Options,
) -> Result<S::Node, String> {
    let mut rt = S::boot(&mut node.disk, options).map_err(|e| format!("boot failed: {e}"))?;
    for &g in groups {
        let store = S::open(&mut node.disk, &mut rt, g, options)
            .map_err(|e| format!("recovery failed: {e}"))?;
        driver
            .add_group(g, store)
            .map_err(|e| format!("restart failed: {e}"))?;
    }
    Ok(rt)
}

/// The payload the checker knows a proposal by: the entry the client proposed, canonical.
fn canonical_payload<S: SimStore>(data: Bytes, records: u32) -> Bytes {
    let proposed = raft::eraftpb::Entry {
        data,
        context: entry::data_context(records).to_vec().into(),
        ..raft::eraftpb::Entry::default()
    };
    S::canonical(proposed).data
}

impl<S: SimStore> World<S> {
    fn next_event(&self) -> Option<(Duration, Event)> {
        let mut best: Option<(Duration, Event)> = None;
        let mut consider = |at: Option<Duration>, ev: Event| {
            if let Some(at) = at {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, ev));
                }
            }
        };
        consider(self.network.next_delivery(), Event::Deliver);
        for (i, n) in self.nodes.iter().enumerate() {
            consider(n.driver.as_ref().map(|_| n.next_turn), Event::Turn(i));
            consider(n.restart_at, Event::Restart(i));
            let persist_done = n.inc.as_ref().and_then(|inc| inc.jobs.keys().next());
            consider(persist_done.map(|&(at, _)| at), Event::PersistDone(i));
            consider(n.disk_heal_at, Event::DiskHeal(i));
        }
        consider(self.heal_at, Event::Heal);
        consider(self.next_client, Event::Client);
        consider(self.next_fault, Event::Fault);
        consider(self.next_move, Event::Move);
        consider(self.next_retention, Event::Retention);
        best
    }

    /// Runs the next event and the checks after it.
    pub fn step(&mut self) -> Result<(), SimFailure> {
        let Some((at, event)) = self.next_event() else {
            return Err(self.fail("no event left"));
        };
        self.clock.set(at);
        self.step += 1;
        let touched = match event {
            Event::Deliver => self.deliver(),
            Event::Turn(i) => {
                self.nodes[i].next_turn = at + TURN_PERIOD;
                Some(i)
            }
            Event::Restart(i) => {
                self.nodes[i].restart_at = None;
                self.crash(i)?;
                self.start_or_retry(i)?;
                self.nodes[i].driver.is_some().then_some(i)
            }
            Event::PersistDone(i) => {
                self.run_jobs(i);
                (!self.crash_point_fired(i)?).then_some(i)
            }
            Event::DiskHeal(i) => {
                self.nodes[i].disk_heal_at = None;
                S::heal(&mut self.nodes[i].disk, false);
                None
            }
            Event::Heal => {
                self.heal_at = None;
                self.network.heal();
                None
            }
            Event::Client => {
                self.client();
                None
            }
            Event::Fault => {
                self.fault()?;
                None
            }
            Event::Move => {
                self.new_target();
                None
            }
            Event::Retention => self.retention(),
        };
        self.mix(at.as_micros() as u64, event_code(event));
        if let Some(i) = touched {
            self.turn(i)?;
            self.crash_point_fired(i)?;
        }
        Ok(())
    }

    /// If a crash point fired on node `i`'s disk, the node crashes now (what the rest of
    /// its turn would have done is lost) and restarts later; true when it did.
    fn crash_point_fired(&mut self, i: usize) -> Result<bool, SimFailure> {
        if self.nodes[i].driver.is_none() || !S::crashed(&self.nodes[i].disk) {
            return Ok(false);
        }
        self.mix(5, i as u64);
        self.crash(i)?;
        let at = self.now() + self.ms(DOWN_MS);
        self.nodes[i].restart_at = Some(at);
        Ok(true)
    }

    /// A group fenced on node `i` (a failed write: it stays fenced until the node restarts)
    /// brings an operator restart, unless one is planned already. A fence can come after
    /// `heal_all` (a write that was in flight when it ran) or from a fault injected while
    /// the node was down.
    fn restart_if_fenced(&mut self, i: usize) {
        let node = &self.nodes[i];
        let fenced = node
            .driver
            .as_ref()
            .is_some_and(|d| self.groups.iter().any(|&g| d.is_fenced(g)));
        if fenced && node.restart_at.is_none() {
            let at = self.now() + self.ms(DOWN_MS);
            self.nodes[i].restart_at = Some(at);
        }
    }

    /// Starts node `i`; while its disk has a fault injected, a failed recovery is retried
    /// later (an operator restarting it again), otherwise it fails the seed.
    fn start_or_retry(&mut self, i: usize) -> Result<(), SimFailure> {
        if !S::faulty(&self.nodes[i].disk) {
            return self.start(i);
        }
        if self.start(i).is_err() {
            let at = self.now() + self.ms(DOWN_MS);
            self.nodes[i].restart_at = Some(at);
        }
        Ok(())
    }

    /// Retention on a random running node and group: compacts through a closed segment's
    /// end at or before the applied index; the node's next turn persists it (the point in
    /// the journal, then the segments deleted).
    fn retention(&mut self) -> Option<usize> {
        let gap = self.ms(RETENTION_GAP_MS);
        self.next_retention = Some(self.now() + gap);
        let i = self.rng.below(self.nodes.len() as u64) as usize;
        let g = self.groups[self.rng.below(self.groups.len() as u64) as usize];
        let node = &mut self.nodes[i];
        let (Some(driver), Some(inc)) = (node.driver.as_mut(), node.inc.as_mut()) else {
            return None;
        };
        let applied = driver.applied_index(g)?;
        let through = driver.store(g)?.retention_point(applied, &mut self.rng)?;
        inc.compactions.push((g, through));
        self.mix(7, through.0);
        Some(i)
    }

    /// Injects a disk fault on a random node (`SimConfig::disk_faults`): a crash point a few
    /// operations ahead, or a window of a full disk or of read errors, after which an
    /// operator restarts the node (its partitions were fenced).
    fn disk_fault(&mut self) {
        if !self.rng.chance(DISK_FAULT_PER_MILLE) {
            return;
        }
        let i = self.rng.below(self.nodes.len() as u64) as usize;
        let fault = match self.rng.below(3) {
            0 => DiskFault::CrashPoint(self.rng.range(1, CRASH_POINT_OPS_MAX + 1)),
            1 => DiskFault::Full,
            _ => DiskFault::ReadErrors,
        };
        self.mix(6, i as u64);
        if !S::inject(&mut self.nodes[i].disk, fault) {
            return;
        }
        if matches!(fault, DiskFault::Full | DiskFault::ReadErrors) {
            let heal = self.now() + self.ms(DISK_FAULT_MS);
            let restart = heal + self.ms(DOWN_MS);
            let node = &mut self.nodes[i];
            node.disk_heal_at = Some(node.disk_heal_at.map_or(heal, |h| h.max(heal)));
            if node.driver.is_some() {
                node.restart_at = Some(node.restart_at.map_or(restart, |r| r.max(restart)));
            }
        }
    }

    fn mix(&mut self, a: u64, b: u64) {
        for x in [a, b] {
            self.digest = (self.digest ^ x).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn deliver(&mut self) -> Option<usize> {
        let batch = self.network.deliver(self.now())?;
        let i = self.nodes.iter().position(|n| n.id == batch.to)?;
        let driver = self.nodes[i].driver.as_mut()?;
        let outcome = driver.step(batch);
        self.mix(outcome.stepped as u64, outcome.dropped as u64);
        Some(i)
    }

    /// A loop turn on node `i`, then its sends, its completions and the checks.
    fn turn(&mut self, i: usize) -> Result<(), SimFailure> {
        if self.nodes[i].driver.is_none() {
            return Ok(());
        }
        if self.pipelined {
            self.finish_persisted(i);
        }
        self.step_moves(i);
        if self.pipelined {
            self.turn_pipelined(i);
        } else if let Some(driver) = self.nodes[i].driver.as_mut() {
            driver.turn();
            for batch in driver.transport_mut().take() {
                self.network.send(self.clock.now(), batch, &mut self.rng);
            }
        }
        if let Some(driver) = self.nodes[i].driver.as_mut() {
            driver.drain_completions(&mut self.completions);
        }
        self.restart_if_fenced(i);
        // The applied entries enter the checker's truth before their acknowledgements.
        self.check_node(i)?;
        let incarnation = self.nodes[i].incarnation;
        for c in std::mem::take(&mut self.completions) {
            let Some(f) = self.in_flight.remove(&(i, incarnation, c.id)) else {
                return Err(self.fail(format!("completion for an unknown proposal {:?}", c.id)));
            };
            if f.group != c.group {
                return Err(self.fail("completion for the wrong group"));
            }
            if let Ok(base) = c.result {
                self.mix(1, base.0 as u64);
                self.checker
                    .on_ack(c.group, &f.payload, base)
                    .map_err(|e| self.fail(e))?;
                if self.config.check_durable {
                    self.check_acked_durable(&f.payload)?;
                }
            }
        }
        Ok(())
    }

    /// A leader on node `i` takes the next step of each move (the broker's move loop).
    fn step_moves(&mut self, i: usize) {
        let Some(driver) = self.nodes[i].driver.as_mut() else {
            return;
        };
        let mut finished = Vec::new();
        for (&g, target) in &self.targets {
            if !driver.is_leader(g) {
                continue;
            }
            let code = match driver.move_members(g, target) {
                Ok(crate::MembershipStep::Done) => {
                    finished.push(g);
                    1
                }
                Ok(crate::MembershipStep::Proposed) => 2,
                Ok(crate::MembershipStep::Transferring(_)) => 3,
                Ok(crate::MembershipStep::Waiting(_)) => 4,
                // Not leading after all, fenced, or raft-rs refused (a transfer runs).
                Err(_) => 5,
            };
            self.digest = (self.digest ^ code).wrapping_mul(0x0100_0000_01b3);
        }
        for g in finished {
            self.targets.remove(&g);
            self.moves_finished += 1;
        }
    }

    /// The turn of a pipelined store, as the broker's `Replicator::turn` does it: begin
    /// (the leaders' appends leave before their own fsync), take each dirty group's disk
    /// work as one batch that ends a simulated latency later, end without waiting for it.
    fn turn_pipelined(&mut self, i: usize) {
        let now = self.now();
        let node = &mut self.nodes[i];
        let (Some(driver), Some(inc)) = (node.driver.as_mut(), node.inc.as_mut()) else {
            return;
        };
        let mut dirty = driver.turn_begin(&inc.persisting);
        let (later, now_due): (Vec<_>, Vec<_>) = std::mem::take(&mut inc.compactions)
            .into_iter()
            .partition(|(g, _)| inc.persisting.contains(g));
        inc.compactions = later;
        for (g, through) in now_due {
            if driver.compact(g, through).is_ok() && !dirty.contains(&g) {
                dirty.push(g);
            }
        }
        for batch in driver.transport_mut().take() {
            self.network.send(now, batch, &mut self.rng);
        }
        // One write per store at a time: a group still persisting keeps what it staged.
        let jobs: JobBatch<S> = dirty
            .into_iter()
            .filter(|g| !inc.persisting.contains(g))
            .filter_map(|g| {
                driver
                    .store_mut(g)
                    .and_then(|s| s.take_job())
                    .map(|j| (g, j))
            })
            .collect();
        if !jobs.is_empty() {
            inc.persisting.extend(jobs.iter().map(|&(g, _)| g));
            let us = if self.rng.chance(SLOW_PERSIST_PER_MILLE) {
                SLOW_PERSIST_US
            } else {
                PERSIST_US
            };
            let at = now + Duration::from_micros(self.rng.range(us.0, us.1));
            inc.jobs.insert((at, self.next_job_seq), jobs);
            self.next_job_seq += 1;
        }
        driver.turn_end(&inc.persisting);
        // Reads from disk complete at once (the broker's `start_reads` runs them as tasks).
        for (g, ranges) in driver.wanted_reads() {
            if let Some(s) = driver.store_mut(g) {
                s.fetch(&mut node.disk, &ranges);
            }
            driver.entries_fetched(g);
            if let Some(s) = driver.store_mut(g) {
                s.fetched_done();
            }
        }
        for batch in driver.transport_mut().take() {
            self.network.send(now, batch, &mut self.rng);
        }
        if driver.has_ready() {
            let us = READY_AGAIN_US;
            let soon = now + Duration::from_micros(self.rng.range(us.0, us.1));
            node.next_turn = node.next_turn.min(soon);
        }
        // A group held by pacing is released at a time of its own (the broker's loop
        // waits for it, as for its next tick).
        if !self.config.sync_min_interval.is_zero() {
            node.next_turn = node.next_turn.min(driver.next_wake_at().max(now));
        }
    }

    /// Node `i`'s earliest batch of disk work ends: it runs on the node's disk.
    fn run_jobs(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Some(inc) = node.inc.as_mut() else {
            return;
        };
        let Some((_, jobs)) = inc.jobs.pop_first() else {
            return;
        };
        let results = S::run_jobs(&mut node.disk, &mut inc.rt, jobs);
        inc.done.extend(results);
    }

    /// Reports node `i`'s finished disk work to the stores and the driver (the broker's
    /// `finish_persisted`): those groups send what waited for it and may begin again.
    fn finish_persisted(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let (Some(driver), Some(inc)) = (node.driver.as_mut(), node.inc.as_mut()) else {
            return;
        };
        if inc.done.is_empty() {
            return;
        }
        let mut groups = Vec::with_capacity(inc.done.len());
        for (g, r) in std::mem::take(&mut inc.done) {
            if let Some(s) = driver.store_mut(g) {
                s.finish_job(r);
            }
            inc.persisting.remove(&g);
            groups.push(g);
        }
        driver.persisted(&groups);
    }

    fn check_node(&mut self, i: usize) -> Result<(), SimFailure> {
        let node = &self.nodes[i];
        let Some(driver) = node.driver.as_ref() else {
            return Ok(());
        };
        for &g in &self.groups {
            let (Some(store), Some(applied)) = (driver.store(g), driver.applied_index(g)) else {
                return Err(self.fail(format!("{} lost group {g}", node.id)));
            };
            let mut read = |lo, hi| canonical_read(store, &node.disk, lo, hi);
            let mut view = GroupView {
                node: driver.node(),
                group: g,
                index: store.index(),
                read: &mut read,
                applied,
                leader_term: driver.is_leader(g).then(|| driver.term(g)).flatten(),
                served_hw: driver.high_watermark(g),
            };
            if let Err(e) = self.checker.check_view(&mut view) {
                return Err(self.fail(e));
            }
        }
        Ok(())
    }

    /// The client proposes a fresh payload to the node it believes leads a random group.
    fn client(&mut self) {
        let now = self.now();
        let gap = if self.rng.chance(CLIENT_QUIET_PER_MILLE) {
            CLIENT_QUIET_MS
        } else {
            CLIENT_GAP_MS
        };
        self.next_client = Some(now + Duration::from_millis(self.rng.range(gap.0, gap.1)));
        let g = self.groups[self.rng.below(self.groups.len() as u64) as usize];
        self.propose(g);
    }

    /// Proposes one fresh payload to `g`; true when a node accepted it.
    pub fn propose(&mut self, g: GroupId) -> bool {
        let n = self.nodes.len() as u64;
        let i = match self.leader_guess.get(&g) {
            Some(&i) if !self.rng.chance(100) => i,
            _ => self.rng.below(n) as usize,
        };
        let Some(driver) = self.nodes[i].driver.as_mut() else {
            self.leader_guess.remove(&g);
            return false;
        };
        let id = self.next_payload;
        let payload = Bytes::from([id.to_be_bytes(), g.0.to_be_bytes()].concat());
        let records = u32::try_from(self.rng.range(1, RECORDS_PER_BATCH_MAX + 1)).unwrap_or(1);
        let data = S::wrap_payload(payload, records);
        match driver.propose(g, data.clone(), records) {
            Ok(pid) => {
                self.next_payload += 1;
                self.leader_guess.insert(g, i);
                let key = (i, self.nodes[i].incarnation, pid);
                let payload = canonical_payload::<S>(data, records);
                self.in_flight.insert(key, InFlight { group: g, payload });
                true
            }
            Err(crate::RaftError::NotLeader {
                leader_hint: Some(l),
                ..
            }) => {
                if let Some(j) = self.nodes.iter().position(|n| n.id == l) {
                    self.leader_guess.insert(g, j);
                }
                false
            }
            Err(_) => {
                self.leader_guess.remove(&g);
                false
            }
        }
    }
}

fn event_code(e: Event) -> u64 {
    match e {
        Event::Deliver => 1,
        Event::Turn(i) => 100 + i as u64,
        Event::Restart(i) => 200 + i as u64,
        Event::PersistDone(i) => 300 + i as u64,
        Event::DiskHeal(i) => 400 + i as u64,
        Event::Retention => 7,
        Event::Heal => 3,
        Event::Client => 4,
        Event::Fault => 5,
        Event::Move => 6,
    }
}

/// Entries `lo..hi` of `store`, canonical, as the checker compares them.
fn canonical_read<S: SimStore>(
    store: &S,
    disk: &S::Disk,
    lo: crate::RaftIndex,
    hi: crate::RaftIndex,
) -> Result<Vec<raft::eraftpb::Entry>, String> {
    let entries = store.read(disk, lo, hi)?;
    Ok(entries.into_iter().map(S::canonical).collect())
}

impl<S: SimStore> World<S> {
    /// Injects one random fault and schedules the next.
    fn fault(&mut self) -> Result<(), SimFailure> {
        let now = self.now();
        self.next_fault =
            Some(now + Duration::from_millis(self.rng.range(FAULT_GAP_MS.0, FAULT_GAP_MS.1)));
        let n = self.nodes.len() as u64;
        let i = self.rng.below(n) as usize;
        let roll = self.rng.below(100);
        self.mix(2, roll);
        match roll {
            0..30 => {
                if self.nodes[i].driver.is_some() && self.nodes[i].restart_at.is_none() {
                    self.crash(i)?;
                    self.nodes[i].restart_at = Some(now + self.ms(DOWN_MS));
                }
            }
            30..50 => {
                let id = self.nodes[i].id;
                for j in 0..self.nodes.len() {
                    let other = self.nodes[j].id;
                    if other != id {
                        self.network.cut(id, other);
                    }
                }
                self.heal_at = Some(now + self.ms(PARTITION_MS));
            }
            50..65 => {
                let j = (i + 1 + self.rng.below(n - 1) as usize) % self.nodes.len();
                let (a, b) = (self.nodes[i].id, self.nodes[j].id);
                self.network.cut(a, b);
                self.heal_at = Some(now + self.ms(PARTITION_MS));
            }
            65..80 => {
                let g = self.groups[self.rng.below(self.groups.len() as u64) as usize];
                let node = &mut self.nodes[i];
                if let Some(store) = node.driver.as_mut().and_then(|d| d.store_mut(g)) {
                    S::fail_next_sync(&mut node.disk, store);
                    // An operator restarts the node whose partition was fenced.
                    let at = now + self.ms(DOWN_MS);
                    self.nodes[i].restart_at.get_or_insert(at);
                }
            }
            80..90 => self.transfer_leadership(i),
            _ => self.network.heal(),
        }
        if self.config.disk_faults {
            self.disk_fault();
        }
        Ok(())
    }

    /// The broker's preferred-leader balancing: node `i`, if it leads a random group,
    /// hands the leadership to another voter that is in sync (`balance_leaders`).
    fn transfer_leadership(&mut self, i: usize) {
        let g = self.groups[self.rng.below(self.groups.len() as u64) as usize];
        let Some(driver) = self.nodes[i].driver.as_ref() else {
            return;
        };
        let Some((voters, _)) = driver.members(g).filter(|_| driver.is_leader(g)) else {
            return;
        };
        let others: Vec<u64> = voters
            .into_iter()
            .filter(|&v| v != self.nodes[i].id.0)
            .collect();
        if others.is_empty() {
            return;
        }
        let to = NodeId(others[self.rng.below(others.len() as u64) as usize]);
        self.mix(8, to.0);
        if let Some(driver) = self.nodes[i].driver.as_mut() {
            if driver.voter_in_sync(g, to) {
                driver.transfer_leader(g, to);
            }
        }
    }

    fn ms(&mut self, range: (u64, u64)) -> Duration {
        Duration::from_millis(self.rng.range(range.0, range.1))
    }

    /// Ends the fault phase: the network heals and turns reliable, every node is (re)started
    /// (a fenced group restarts with its node), clients stop.
    pub fn heal_all(&mut self) -> Result<(), SimFailure> {
        tracing::info!(
            at_ms = self.now().as_millis() as u64,
            "sim: fault phase over, healing"
        );
        self.next_fault = None;
        self.next_move = None;
        self.next_client = None;
        self.heal_at = None;
        self.network.heal();
        self.network.set_faults(NetworkFaults::reliable());
        for i in 0..self.nodes.len() {
            self.nodes[i].disk_heal_at = None;
            S::heal(&mut self.nodes[i].disk, true);
            let fenced = self.nodes[i]
                .driver
                .as_ref()
                .is_some_and(|d| self.groups.iter().any(|&g| d.is_fenced(g)));
            if self.nodes[i].driver.is_none() || fenced {
                self.nodes[i].restart_at = None;
                self.crash(i)?;
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// Stops the client (no more proposals).
    pub fn stop_client(&mut self) {
        self.next_client = None;
    }

    /// Whether `g` hibernates on every running node.
    pub fn asleep_everywhere(&self, g: GroupId) -> bool {
        self.nodes
            .iter()
            .all(|n| n.driver.as_ref().is_some_and(|d| d.is_asleep(g)))
    }

    /// The index of the node serving a high watermark for `g` (a leader that committed in
    /// its own term).
    pub fn serving_leader(&self, g: GroupId) -> Option<usize> {
        self.nodes.iter().position(|n| {
            n.driver
                .as_ref()
                .is_some_and(|d| d.high_watermark(g).is_some())
        })
    }

    /// Whether the client still waits for a proposal to `g`.
    pub fn waiting_on(&self, g: GroupId) -> bool {
        self.in_flight.values().any(|f| f.group == g)
    }

    pub fn groups(&self) -> Vec<GroupId> {
        self.groups.clone()
    }

    /// Every acknowledged payload is readable on every node at its offset.
    pub fn check_acked_readable(&self) -> Result<(), SimFailure> {
        for n in &self.nodes {
            let Some(d) = n.driver.as_ref() else {
                return Err(self.fail(format!("{} is down at the end", n.id)));
            };
            for &g in &self.groups {
                if !self.members(g).contains(&n.id.0) {
                    continue;
                }
                let store = d.store(g).ok_or_else(|| self.fail("group missing"))?;
                let ix = store.index();
                let end = crate::RaftIndex(ix.last_index().0 + 1);
                let entries = canonical_read(store, &n.disk, ix.first_index(), end)
                    .map_err(|e| self.fail(e))?;
                // Base offsets summed from the compaction point (sealed entries' ends are not
                // in the index), checked against the index where it holds them.
                let mut by_base: BTreeMap<i64, &Bytes> = BTreeMap::new();
                let mut base = ix.compaction_point().kafka_end;
                for e in &entries {
                    let at = crate::RaftIndex(e.index);
                    match ix.kafka_base_of(at) {
                        Ok(b) if b != base => {
                            return Err(self.fail(format!(
                                "{} {g} index {at:?}: base offset {b:?}, the entries say {base:?}",
                                n.id
                            )))
                        }
                        _ => {}
                    }
                    let kind =
                        crate::entry::classify(e).map_err(|why| self.fail(why.to_string()))?;
                    if !e.data.is_empty() {
                        by_base.insert(base.0, &e.data);
                    }
                    base = crate::KafkaOffset(base.0 + i64::from(kind.record_count()));
                }
                let kept_from = ix.compaction_point().kafka_end;
                for (payload, ag, base) in self.checker.acked() {
                    if ag == g && base >= kept_from && by_base.get(&base.0) != Some(&payload) {
                        return Err(self.fail(format!(
                            "lost write: {} {g} does not hold the payload acknowledged at {base:?}",
                            n.id
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether every member of `g` (voter or learner, as its serving leader applied them)
    /// has applied everything that leader has.
    pub fn caught_up(&self, g: GroupId) -> bool {
        let Some(l) = self.serving_leader(g) else {
            return false;
        };
        let target = self.nodes[l]
            .driver
            .as_ref()
            .and_then(|d| d.applied_index(g));
        let members = self.members(g);
        self.nodes
            .iter()
            .filter(|n| members.contains(&n.id.0))
            .all(|n| n.driver.as_ref().and_then(|d| d.applied_index(g)) == target)
    }

    /// The members of `g` as its serving leader applied them (every node without one).
    fn members(&self, g: GroupId) -> Vec<u64> {
        let all = || self.nodes.iter().map(|n| n.id.0).collect();
        let Some(l) = self.serving_leader(g) else {
            return all();
        };
        match self.nodes[l].driver.as_ref().and_then(|d| d.members(g)) {
            Some((voters, learners)) => voters.into_iter().chain(learners).collect(),
            None => all(),
        }
    }

    /// Why `g` is not caught up: its serving leader, members and each node's applied index
    /// and role (for failure messages).
    pub fn catch_up_report(&self, g: GroupId) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| match n.driver.as_ref() {
                Some(d) => format!(
                    "{}: applied {:?} members {:?} raft {}",
                    n.id.0,
                    d.applied_index(g).map(|i| i.0),
                    d.members(g),
                    d.describe(g).unwrap_or_default()
                ),
                None => format!("{}: down", n.id.0),
            })
            .collect();
        format!(
            "{g}: serving leader {:?}, members {:?}; {}",
            self.serving_leader(g).map(|i| self.nodes[i].id.0),
            self.members(g),
            nodes.join("; ")
        )
    }

    /// Moves not finished yet.
    pub fn moves_pending(&self) -> usize {
        self.targets.len()
    }

    /// The unfinished moves, each with its group's state (for failure messages).
    pub fn moves_report(&self) -> Vec<String> {
        self.targets
            .iter()
            .map(|(&g, t)| {
                let t: Vec<u64> = t.iter().map(|n| n.0).collect();
                format!("target {t:?} of {}", self.catch_up_report(g))
            })
            .collect()
    }

    /// The fewest durable copies a committed entry may have: a majority of the smallest
    /// configuration (every configuration has at least `voters` voters).
    fn quorum(&self) -> usize {
        let voters = self.config.voters.min(self.config.nodes);
        usize::try_from(voters / 2 + 1).unwrap_or(usize::MAX)
    }

    /// Gives a random group a new random target of `voters` nodes.
    fn new_target(&mut self) {
        let now = self.now();
        self.next_move = Some(now + self.ms(MOVE_GAP_MS));
        let g = self.groups[self.rng.below(self.groups.len() as u64) as usize];
        let mut pool: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        let size = self.config.voters.min(self.config.nodes) as usize;
        let mut target = Vec::with_capacity(size);
        while target.len() < size {
            let k = self.rng.below(pool.len() as u64) as usize;
            target.push(pool.swap_remove(k));
        }
        self.mix(3, target.iter().fold(g.0, |a, n| a * 31 + n.0));
        self.targets.insert(g, target);
    }
}

/// When the first move target comes (`None` without moves).
fn config_moves_at(config: &SimConfig, rng: &mut Prng) -> Option<Duration> {
    config
        .moves
        .then(|| Duration::from_millis(rng.range(MOVE_GAP_MS.0, MOVE_GAP_MS.1)))
}
