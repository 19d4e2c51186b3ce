//! The deterministic simulator (STYLE.md 9; issue 5): the real `MultiRaft` driver and
//! raft-rs on simulated time, a simulated disk and a simulated network, all driven by one
//! seeded `Prng`, single-threaded. The world is generic over the log store (`SimStore`):
//! `run` uses the in-memory `MemLogStore`, `run_with` any other (the broker's
//! storage-backed store, raft/SIM-ON-STORAGE.md).
//!
//! A run has a fault phase (message drop, duplication, delay and reordering; partitions of
//! one node or one link, and their heals; node crashes that lose unsynced writes, possibly
//! leaving a torn tail; fdatasync failures that fence a group until its node restarts)
//! while a client proposes unique payloads; then a liveness phase: everything heals, every
//! group must elect a leader that commits a fresh proposal, and every node must catch up.
//! The checker (`checker`) runs after every step. A failure names its seed and replays
//! exactly: `STRAND_SIM_SEED=<seed> cargo test -p strand-raft --test sim`.
//!
//! With `moves`, partition moves run through all of it: the groups start on the first
//! `voters` nodes, the others host them as new replicas do (learners of nothing yet), and
//! every so often a group gets a new random target of `voters` nodes that its leader
//! reaches with `MultiRaft::move_members` (learners, joint consensus, leader hand-over).
//! The liveness phase then also waits for every move to finish, and durability counts the
//! smallest majority any configuration had.
//!
//! With a pipelined store (`SimStore::pipelined`; `MemOptions::pipelined` for the
//! in-memory one) a node's turn is split around its disk work as the broker's is: the
//! driver keeps stepping while each turn's writes take a simulated latency.
//!
//! Deliberately absent: log compaction and snapshots, read corruption and ENOSPC (the
//! in-memory store has no such faults yet).

mod checker;
mod network;
mod store;
mod world;

use std::fmt;
use std::time::Duration;

pub use network::NetworkFaults;
pub use store::{DiskFault, MemOptions, SimStore};

use crate::mem_store::{MemLogStore, SyncBehaviour};
use crate::types::GroupId;
use world::World;

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nodes (each hosts every group).
    pub nodes: u64,
    /// The first voters of every group: nodes 1 to `voters` (at most `nodes`).
    pub voters: u64,
    /// Whether groups move to random targets of `voters` nodes during the fault phase.
    pub moves: bool,
    /// Raft groups, each on every node.
    pub groups: u64,
    /// Simulated time with faults and client load.
    pub fault_phase: Duration,
    /// After healing, the time allowed for every group to make progress and every node to
    /// catch up.
    pub liveness_deadline: Duration,
    /// Network faults during the fault phase.
    pub network: NetworkFaults,
    /// Whether faults are injected (crashes, partitions, sync failures).
    pub faults: bool,
    /// Whether disk faults are injected too (`SimStore::inject`: crash points, a full disk,
    /// read errors); for stores over a simulated disk.
    pub disk_faults: bool,
    /// Whether retention compacts groups' logs (`SimStore::retention_point`), so that
    /// lagging or restarted replicas receive snapshots.
    pub compaction: bool,
    /// `LiesAboutSync` plants a bug the checker must catch (`run`'s `MemLogStore` only).
    pub sync_behaviour: SyncBehaviour,
    /// Whether acknowledgements and crashes check that committed entries are durable on a
    /// majority. Off only
    /// to prove that the client-visible checks catch a lost write on their own.
    pub check_durable: bool,
    /// `DriverConfig::sync_min_interval` of every node (group commit pacing).
    pub sync_min_interval: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            voters: 3,
            moves: false,
            groups: 3,
            fault_phase: Duration::from_secs(8),
            liveness_deadline: Duration::from_secs(30),
            network: NetworkFaults::lossy(),
            faults: true,
            disk_faults: false,
            compaction: false,
            sync_behaviour: SyncBehaviour::Honest,
            check_durable: true,
            sync_min_interval: Duration::ZERO,
        }
    }
}

/// What a passing run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub steps: u64,
    /// Proposals acknowledged to the client.
    pub acked: usize,
    /// Entries committed over all groups (no-ops included).
    pub committed: usize,
    /// Simulated time at the end.
    pub sim_time: Duration,
    /// Group moves finished (`SimConfig::moves`).
    pub moves: usize,
    /// A hash of every event; equal for two runs of one seed.
    pub digest: u64,
}

/// A violated invariant (or lost liveness), with what replays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimFailure {
    pub seed: u64,
    pub step: u64,
    pub at: Duration,
    pub what: String,
    /// The command that replays the seed after `STRAND_SIM_SEED=<seed>` (`SimStore::REPLAY`).
    pub replay: &'static str,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sim seed {} failed at step {} ({} ms simulated): {}; replay: STRAND_SIM_SEED={} {}",
            self.seed,
            self.step,
            self.at.as_millis(),
            self.what,
            self.seed,
            self.replay
        )
    }
}

/// Runs one seed over the in-memory store (`MemLogStore` with `config.sync_behaviour`,
/// not pipelined):
/// the fault phase, then the liveness phase and the final checks. A panic (an assertion in
/// raft-rs or in our code) is reported as a failure of the seed.
pub fn run(seed: u64, config: &SimConfig) -> Result<SimReport, SimFailure> {
    let options = MemOptions {
        sync_behaviour: config.sync_behaviour,
        pipelined: false,
    };
    run_with::<MemLogStore>(seed, config, &options)
}

/// Runs one seed as `run` does, over the store `S` with `options`.
pub fn run_with<S: SimStore>(
    seed: u64,
    config: &SimConfig,
    options: &S::Options,
) -> Result<SimReport, SimFailure> {
    // The world is dropped with the panic; nothing of it is used after the unwind.
    let run = || run_unchecked::<S>(seed, config, options);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a non-string panic");
        Err(SimFailure {
            seed,
            step: 0,
            at: Duration::ZERO,
            what: format!("panicked: {message}"),
            replay: S::REPLAY,
        })
    })
}

fn run_unchecked<S: SimStore>(
    seed: u64,
    config: &SimConfig,
    options: &S::Options,
) -> Result<SimReport, SimFailure> {
    let mut w = World::<S>::new(seed, config.clone(), options.clone())?;
    while w.now() < config.fault_phase {
        w.step()?;
    }
    w.heal_all()?;
    let deadline = w.now() + config.liveness_deadline;
    let groups = w.groups();
    let acked_before: Vec<usize> = groups.iter().map(|&g| w.checker.acked_in(g)).collect();
    loop {
        let progressed: Vec<bool> = groups
            .iter()
            .zip(&acked_before)
            .map(|(&g, &before)| w.checker.acked_in(g) > before)
            .collect();
        if progressed.iter().all(|&p| p)
            && groups.iter().all(|&g| w.caught_up(g))
            && w.moves_pending() == 0
        {
            break;
        }
        if w.now() > deadline {
            let behind: Vec<String> = groups
                .iter()
                .filter(|&&g| !w.caught_up(g))
                .map(|&g| w.catch_up_report(g))
                .collect();
            return Err(w.fail(format!(
                "no progress {} s after healing: groups progressed {progressed:?}, moves unfinished: {:?}, not caught up: {behind:?}",
                config.liveness_deadline.as_secs(),
                w.moves_report()
            )));
        }
        for (&g, &p) in groups.iter().zip(&progressed) {
            if !p && !w.waiting_on(g) {
                w.propose(g);
            }
        }
        w.step()?;
    }
    if config.check_durable {
        w.check_durable()?;
    }
    w.check_acked_readable()?;
    Ok(SimReport {
        seed,
        steps: w.step,
        acked: w.checker.acked().count(),
        committed: w.checker.committed_count(),
        sim_time: w.now(),
        moves: w.moves_finished,
        digest: w.digest,
    })
}

/// Leader failover time: a healthy cluster elects leaders and takes writes, then the leader
/// of the first group crashes; returns the simulated time until another node serves that
/// group's high watermark (elected and committed an entry of its term). With `hibernated`
/// the client stops first and the crash waits until the group sleeps on every node.
pub fn failover(seed: u64, hibernated: bool) -> Result<Duration, SimFailure> {
    let config = SimConfig {
        faults: false,
        network: NetworkFaults::reliable(),
        ..SimConfig::default()
    };
    let options = MemOptions {
        sync_behaviour: config.sync_behaviour,
        pipelined: false,
    };
    let mut w = World::<MemLogStore>::new(seed, config, options)?;
    let g = GroupId(1);
    let ready_deadline = Duration::from_secs(10);
    // Run a while so the crash lands at a random point of the heartbeat cycle.
    let settle = ready_deadline / 2 + Duration::from_millis(w.rng.below(1000));
    while w.now() < settle || w.serving_leader(g).is_none() {
        if w.now() > ready_deadline + settle {
            return Err(w.fail("no leader before the crash"));
        }
        w.step()?;
    }
    if hibernated {
        w.stop_client();
        let deadline = w.now() + ready_deadline;
        while !w.asleep_everywhere(g) {
            if w.now() > deadline {
                return Err(w.fail("the idle group did not hibernate within 10 s"));
            }
            w.step()?;
        }
    }
    let old = w
        .serving_leader(g)
        .expect("the loop above waited for a serving leader");
    let crashed_at = w.now();
    w.crash(old)?;
    loop {
        w.step()?;
        if w.serving_leader(g).is_some() {
            return Ok(w.now() - crashed_at);
        }
        if w.now() > crashed_at + ready_deadline {
            return Err(w.fail("no new leader 10 s after the leader crashed"));
        }
    }
}
