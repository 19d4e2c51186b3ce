//! `MultiRaft` scenarios, step by step on a hand-driven clock and a lossless in-memory
//! network: Kafka offsets, leader hints, fencing and peer-input checks.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use raft::eraftpb::{Entry, Message, MessageType};
use strand_raft::multi_raft::{
    ELECTION_TICKS_MAX_DEFAULT, HEARTBEAT_TICKS_DEFAULT, HIBERNATE_TICKS_DEFAULT,
    TICK_INTERVAL_DEFAULT,
};
use strand_raft::{
    Ack, Clock, Completion, DriverConfig, DurableImage, GroupId, GroupMessage, KafkaOffset,
    LogStore, MemLogStore, MembershipStep, MessageBatch, MultiRaft, NodeId, ProposalId, RaftError,
    RaftIndex, SyncBehaviour, Transport,
};

#[derive(Clone, Default)]
struct TestClock(Rc<Cell<Duration>>);

impl Clock for TestClock {
    fn now(&self) -> Duration {
        self.0.get()
    }
}

#[derive(Default)]
struct Queue(Vec<MessageBatch>);

impl Transport for Queue {
    fn send(&mut self, batch: MessageBatch) {
        self.0.push(batch);
    }
}

type Driver = MultiRaft<MemLogStore, Queue, TestClock>;

const G: GroupId = GroupId(7);

struct Cluster {
    clock: TestClock,
    nodes: Vec<Driver>,
    /// Crashed nodes: not turned, and what is sent to them is lost.
    down: Vec<bool>,
    completions: Vec<Completion>,
    /// Raft messages (not counting empty liveness batches) delivered by `settle`.
    delivered: usize,
    /// Pipelined persistence (the broker's): per node, whether its writes are held (a slow
    /// disk) and the groups whose write is in flight.
    pipelined: bool,
    hold: Vec<bool>,
    persisting: Vec<std::collections::BTreeSet<GroupId>>,
    /// Store writes each node began (pipelined only).
    writes: Vec<usize>,
}

impl Cluster {
    /// Three nodes, one group, node 1 elected.
    fn new() -> Self {
        Self::with(false)
    }

    /// As `new`; `pipelined`: the drivers persist as the broker does (`turn_end`, then
    /// `persisted` once each write is done).
    fn with(pipelined: bool) -> Self {
        Self::sized(3, pipelined)
    }

    /// As `with`, on `count` nodes: the group's voters are nodes 1 to 3 (the others host it
    /// as a new replica does: knowing those voters, not being one).
    fn sized(count: u64, pipelined: bool) -> Self {
        Self::configured(count, pipelined, |_| {})
    }

    /// As `sized`, with `configure` applied to every node's driver settings.
    fn configured(count: u64, pipelined: bool, configure: impl Fn(&mut DriverConfig)) -> Self {
        let clock = TestClock::default();
        let nodes = (1..=count)
            .map(|id| {
                let mut config = DriverConfig::new(NodeId(id), id);
                config.async_persist = pipelined;
                configure(&mut config);
                let mut d = MultiRaft::new(config, clock.clone(), Queue::default());
                let store =
                    MemLogStore::recover(DurableImage::new(&[1, 2, 3]), SyncBehaviour::Honest)
                        .expect("an empty image recovers");
                d.add_group(G, store).expect("group starts");
                d
            })
            .collect();
        let mut c = Self {
            clock,
            nodes,
            down: vec![false; count as usize],
            completions: Vec::new(),
            delivered: 0,
            pipelined,
            hold: vec![false; count as usize],
            persisting: vec![Default::default(); count as usize],
            writes: vec![0; count as usize],
        };
        c.nodes[0].campaign(G).expect("campaign");
        c.settle();
        assert!(c.nodes[0].is_leader(G));
        c
    }

    /// Turns every node and delivers every message until the network is quiet.
    fn settle(&mut self) {
        for _ in 0..100 {
            let mut sent = Vec::new();
            for (n, d) in self.nodes.iter_mut().enumerate() {
                if self.down[n] {
                    continue;
                }
                if self.pipelined {
                    if !self.hold[n] {
                        let done: Vec<GroupId> = std::mem::take(&mut self.persisting[n])
                            .into_iter()
                            .collect();
                        d.persisted(&done);
                    }
                    let persisting = self.persisting[n].clone();
                    let dirty = d.turn_begin(&persisting);
                    self.writes[n] += dirty.len();
                    self.persisting[n].extend(dirty);
                    d.turn_end(&self.persisting[n]);
                } else {
                    d.turn();
                }
                sent.append(&mut d.transport_mut().0);
                d.drain_completions(&mut self.completions);
            }
            let releasing = (0..self.nodes.len())
                .any(|n| !self.down[n] && !self.hold[n] && !self.persisting[n].is_empty());
            if sent.is_empty() && !releasing {
                return;
            }
            for batch in sent {
                let to = usize::try_from(batch.to.0 - 1).expect("node ids start at 1");
                if !self.down[to] {
                    self.delivered += batch.messages.len();
                    self.nodes[to].step(batch);
                }
            }
        }
        panic!("the cluster did not settle");
    }

    fn propose(&mut self, node: usize, records: u32) -> Result<(), RaftError> {
        let payload = Bytes::from(vec![records as u8; 10]);
        self.nodes[node].propose(G, payload, records).map(|_| ())
    }

    fn advance(&mut self, by: Duration) {
        self.clock.0.set(self.clock.0.get() + by);
    }

    /// Every completion so far: (proposal, outcome).
    fn results(&self) -> Vec<(ProposalId, Result<KafkaOffset, RaftError>)> {
        self.completions
            .iter()
            .map(|x| (x.id, x.result.clone()))
            .collect()
    }

    /// Node 2 cut off (down), three entries proposed by leader node 1 and committed on
    /// nodes 1 and 3.
    fn commit_three_without_node_2(&mut self) {
        self.down[1] = true;
        for _ in 0..3 {
            self.propose(0, 1).expect("leader accepts");
        }
        self.settle();
        assert_eq!(self.nodes[0].high_watermark(G), Some(KafkaOffset(3)));
    }

    /// Node `id` restarted on an empty data directory (wiped): same id, no log, no vote.
    fn wipe(&mut self, id: u64) {
        let store = MemLogStore::recover(DurableImage::new(&[1, 2, 3]), SyncBehaviour::Honest)
            .expect("an empty image recovers");
        self.replace(id, store);
    }

    /// Node `id` restarted from what it made durable (what it only held in memory, such
    /// as its followers' progress, is gone).
    fn restart(&mut self, id: u64) {
        let image = self.nodes[id as usize - 1]
            .store(G)
            .expect("the node hosts G")
            .crash_image(0);
        let store = MemLogStore::recover(image, SyncBehaviour::Honest).expect("recovers");
        self.replace(id, store);
    }

    fn replace(&mut self, id: u64, store: MemLogStore) {
        let config = DriverConfig::new(NodeId(id), id);
        let mut d = MultiRaft::new(config, self.clock.clone(), Queue::default());
        d.add_group(G, store).expect("group starts");
        self.nodes[id as usize - 1] = d;
    }

    /// `n` ticks, the network settling after each.
    fn ticks(&mut self, n: usize) {
        for _ in 0..n {
            self.advance(TICK_INTERVAL_DEFAULT);
            self.settle();
        }
    }
}

#[test]
fn idle_groups_hibernate_and_wake() {
    let mut c = Cluster::new();
    c.ticks(HIBERNATE_TICKS_DEFAULT + 5);
    for d in &c.nodes {
        assert!(d.is_asleep(G), "{:?} still awake", d.node());
    }
    // Asleep, the group sends nothing: only the nodes' empty liveness batches go out.
    c.delivered = 0;
    c.ticks(50);
    assert_eq!(c.delivered, 0, "a hibernating group sent raft messages");
    assert!(c.nodes.iter().all(|d| d.is_asleep(G)) && c.nodes[0].is_leader(G));

    // A stalled loop (no turn for 2 s) does not take its own stall for its peers' silence.
    c.advance(Duration::from_secs(2));
    c.settle();
    assert!(
        c.nodes.iter().all(|d| d.is_asleep(G)),
        "a stall woke the groups"
    );

    // A peer that reconnects (it may have restarted within an election timeout) wakes the
    // groups it belongs to; they fall asleep again.
    c.nodes[0].peer_reconnected(NodeId(3));
    assert!(
        !c.nodes[0].is_asleep(G),
        "the leader stayed asleep for a reconnected peer"
    );
    c.ticks(HIBERNATE_TICKS_DEFAULT + 5);
    assert!(c.nodes.iter().all(|d| d.is_asleep(G)));

    // A proposal wakes it and commits; then it falls asleep again.
    c.propose(0, 2).expect("the sleeping leader accepts");
    c.settle();
    assert_eq!(
        c.completions.last().map(|x| x.result.clone()),
        Some(Ok(KafkaOffset(0)))
    );
    assert!(!c.nodes[0].is_asleep(G));
    c.ticks(HIBERNATE_TICKS_DEFAULT + 5);
    assert!(c.nodes.iter().all(|d| d.is_asleep(G)));
    for d in &c.nodes {
        assert_eq!(
            d.applied_kafka_end(G),
            Some(KafkaOffset(2)),
            "{:?}",
            d.node()
        );
    }

    // The leader's node dies: its silence wakes the followers, which elect a new leader
    // within the usual failover time.
    c.down[0] = true;
    let mut waited = Duration::ZERO;
    while !(c.nodes[1].is_leader(G) || c.nodes[2].is_leader(G)) {
        assert!(
            waited < Duration::from_secs(2),
            "no new leader 2 s after the crash"
        );
        c.ticks(1);
        waited += TICK_INTERVAL_DEFAULT;
    }
    let new = if c.nodes[1].is_leader(G) { 1 } else { 2 };
    c.propose(new, 1).expect("the new leader accepts");
    c.settle();
    assert_eq!(
        c.completions.last().map(|x| x.result.clone()),
        Some(Ok(KafkaOffset(2)))
    );
}

#[test]
fn offsets_count_records_of_committed_data_only() {
    let mut c = Cluster::new();
    // The new leader's no-op (raft index 1 after the election) takes no Kafka offset.
    assert_eq!(c.nodes[0].high_watermark(G), Some(KafkaOffset(0)));
    c.propose(0, 3).expect("leader accepts");
    c.propose(0, 2).expect("leader accepts");
    c.settle();
    let results: Vec<_> = c.completions.iter().map(|x| x.result.clone()).collect();
    assert_eq!(results, vec![Ok(KafkaOffset(0)), Ok(KafkaOffset(3))]);
    assert_eq!(c.nodes[0].high_watermark(G), Some(KafkaOffset(5)));
    // Followers learn the commit with the next heartbeat.
    c.ticks(HEARTBEAT_TICKS_DEFAULT);
    for d in &c.nodes {
        assert_eq!(
            d.applied_kafka_end(G),
            Some(KafkaOffset(5)),
            "{:?}",
            d.node()
        );
        let index = d.store(G).expect("group").index();
        // Raft index 1 is the no-op; the batches are indexes 2 and 3 (the applied one;
        // the entries before it are sealed, their offsets no longer indexed).
        assert_eq!(index.kafka_base_of(RaftIndex(3)), Ok(KafkaOffset(3)));
        assert_eq!(index.kafka_end_at(RaftIndex(3)), Ok(KafkaOffset(5)));
        assert_eq!(index.term_of(RaftIndex(2)), index.term_of(RaftIndex(3)));
    }
}

/// Messages delivered while `c` commits one proposal of its leader (node 1).
fn messages_per_proposal(c: &mut Cluster) -> usize {
    c.settle();
    let before = c.delivered;
    c.propose(0, 1).expect("leader accepts");
    c.settle();
    assert!(matches!(c.results().last(), Some((_, Ok(_)))));
    c.delivered - before
}

#[test]
fn a_write_costs_each_follower_one_append_and_one_answer() {
    // Lazy commit notice (the broker's partitions): an append and its answer per follower;
    // the followers learn the commit index from the next message.
    let mut c = Cluster::new();
    assert_eq!(messages_per_proposal(&mut c), 4);
    assert_eq!(c.nodes[1].applied_kafka_end(G), Some(KafkaOffset(0)));
    c.ticks(HEARTBEAT_TICKS_DEFAULT);
    assert_eq!(c.nodes[1].applied_kafka_end(G), Some(KafkaOffset(1)));
    // A second write carries the first one's commit.
    assert_eq!(messages_per_proposal(&mut c), 4);
    assert_eq!(c.nodes[2].applied_kafka_end(G), Some(KafkaOffset(1)));
}

#[test]
fn an_eager_group_announces_each_commit_at_once() {
    // The controller's group: every node applies the entry within the same exchange, at
    // the cost of an empty append and its answer per follower.
    let mut c = Cluster::configured(3, false, |config| {
        config.eager_commit_groups.insert(G);
    });
    assert_eq!(messages_per_proposal(&mut c), 8);
    for d in &c.nodes {
        assert_eq!(
            d.applied_kafka_end(G),
            Some(KafkaOffset(1)),
            "{:?}",
            d.node()
        );
    }
}

#[test]
fn acks_one_answers_when_the_leader_appended() {
    let mut c = Cluster::new();
    // Both followers are down: nothing can commit, yet acks=1 is answered.
    c.down[1] = true;
    c.down[2] = true;
    let payload = Bytes::from(vec![3u8; 10]);
    let id = c.nodes[0]
        .propose_acked(G, payload.clone(), 3, Ack::Append)
        .expect("leader accepts");
    let waits = c.nodes[0].propose(G, payload, 2).expect("leader accepts");
    c.settle();
    let results = c.results();
    assert_eq!(
        results,
        vec![(id, Ok(KafkaOffset(0)))],
        "only the acks=1 batch is answered"
    );
    assert_eq!(
        c.nodes[0].high_watermark(G),
        Some(KafkaOffset(0)),
        "nothing committed"
    );

    // The followers return: the acks=all batch commits; the acks=1 one is not answered twice.
    c.down[1] = false;
    c.down[2] = false;
    c.ticks(5);
    let results = c.results();
    assert_eq!(
        results,
        vec![(id, Ok(KafkaOffset(0))), (waits, Ok(KafkaOffset(3)))]
    );
    assert_eq!(c.nodes[0].high_watermark(G), Some(KafkaOffset(5)));
}

#[test]
fn a_follower_refuses_with_a_leader_hint() {
    let mut c = Cluster::new();
    let refused = c.propose(1, 1);
    assert_eq!(
        refused,
        Err(RaftError::NotLeader {
            group: G,
            leader_hint: Some(NodeId(1))
        })
    );
    assert_eq!(
        c.nodes[1].high_watermark(G),
        None,
        "only the leader serves a high watermark"
    );
}

#[test]
fn a_failed_sync_fences_the_group_and_acknowledges_nothing() {
    let mut c = Cluster::new();
    c.nodes[0].store_mut(G).expect("group").fail_next_sync();
    c.propose(0, 1).expect("accepted before the write");
    c.settle();
    let results: Vec<_> = c.completions.iter().map(|x| x.result.clone()).collect();
    assert_eq!(results, vec![Err(RaftError::Fenced { group: G })]);
    assert!(c.nodes[0].is_fenced(G));
    assert!(!c.nodes[0].is_leader(G));
    assert_eq!(c.propose(0, 1), Err(RaftError::Fenced { group: G }));
    assert_eq!(c.nodes[0].high_watermark(G), None);
}

#[test]
fn a_follower_that_lost_acknowledged_entries_is_fenced_and_the_group_goes_on() {
    let mut c = Cluster::new();
    for _ in 0..3 {
        c.propose(0, 1).expect("leader accepts");
    }
    c.settle();
    let committed = c.nodes[0].high_watermark(G);
    assert_eq!(committed, Some(KafkaOffset(3)));
    // Node 3 comes back with an empty data directory (wiped): same id, no log, no vote.
    c.wipe(3);
    // The leader's next heartbeat counts node 3 through what it acknowledged: raft-rs would
    // panic ("to_commit is out of range"); the group is fenced on node 3 instead.
    c.ticks(HEARTBEAT_TICKS_DEFAULT + 1);
    assert!(c.nodes[2].is_fenced(G), "the wiped replica is fenced");
    assert!(c.nodes[0].is_leader(G));
    // The group goes on with the two replicas that hold the data.
    c.propose(0, 1).expect("leader accepts");
    c.settle();
    assert_eq!(c.nodes[0].high_watermark(G), Some(KafkaOffset(4)));
}

/// A node restarted blank (its data directory wiped) with no leader around: it must not
/// help a stale node win, or the entries it acknowledged with the (down) leader are lost.
#[test]
fn a_blank_replica_votes_for_no_stale_candidate_until_a_leader_reaches_it() {
    let mut c = Cluster::new();
    // Node 2 is cut off; three entries commit on nodes 1 and 3.
    c.commit_three_without_node_2();
    // Node 1 goes down; node 3 comes back wiped; node 2 returns without the entries.
    c.down[0] = true;
    c.wipe(3);
    c.down[1] = false;
    // Many election timeouts: node 2 campaigns and node 3 does not vote for it.
    for _ in 0..10 * ELECTION_TICKS_MAX_DEFAULT {
        c.ticks(1);
        assert!(
            !c.nodes[1].is_leader(G) && !c.nodes[2].is_leader(G),
            "a stale candidate won with a blank replica's vote"
        );
    }
    // Node 1 restarts (from what it made durable: it forgot what node 3 had acknowledged,
    // so node 3 is not fenced) and leads with every committed entry; node 3 catches up.
    c.restart(1);
    c.down[0] = false;
    c.ticks(3 * ELECTION_TICKS_MAX_DEFAULT);
    let leader = (0..3)
        .find(|&n| c.nodes[n].is_leader(G))
        .expect("a leader once node 1 is back");
    c.propose(leader, 1).expect("leader accepts");
    c.settle();
    assert_eq!(c.nodes[leader].high_watermark(G), Some(KafkaOffset(4)));
    c.ticks(HEARTBEAT_TICKS_DEFAULT + 1); // followers learn the commit index
    for n in 0..3 {
        assert_eq!(
            c.nodes[n].applied_kafka_end(G),
            Some(KafkaOffset(4)),
            "node {}",
            n + 1
        );
    }
    // Reached by a leader, node 3 votes as any replica: without node 1, nodes 2 and 3 elect.
    c.down[0] = true;
    c.ticks(3 * ELECTION_TICKS_MAX_DEFAULT);
    assert!(
        c.nodes[1].is_leader(G) || c.nodes[2].is_leader(G),
        "nodes 2 and 3 elect a leader"
    );
}

/// A replica blank because its group is new on its node (the leader never reached it
/// before it died) and trusted as such by its caller (`trust_blank`: the broker knows from
/// its data directory's incarnation) votes like any: the follower holding the committed
/// entries leads. Untrusted, it refuses that follower (the test above).
#[test]
fn a_replica_trusted_as_new_votes_for_the_follower_holding_the_entries() {
    let mut c = Cluster::new();
    c.commit_three_without_node_2();
    // The leader dies; node 2 holds nothing of the group (as if it had never been
    // reached) and its caller knows the group is new there.
    c.down[0] = true;
    c.wipe(2);
    c.nodes[1].trust_blank(G);
    c.down[1] = false;
    c.ticks(3 * ELECTION_TICKS_MAX_DEFAULT);
    assert!(
        c.nodes[2].is_leader(G),
        "node 3, holding the entries, leads"
    );
    c.propose(2, 1).expect("leader accepts");
    c.settle();
    assert_eq!(c.nodes[2].high_watermark(G), Some(KafkaOffset(4)));
    c.ticks(HEARTBEAT_TICKS_DEFAULT + 1); // the follower learns the commit index
    assert_eq!(c.nodes[1].applied_kafka_end(G), Some(KafkaOffset(4)));
}

/// A replica that opened blank and then led the group itself (a new group's first leader)
/// knows a leader: later it votes as any replica. Found by the storage simulator (seed
/// 3029): the first leader of a group kept refusing votes to candidates ahead of it, and
/// once the only other up-to-date voter was down the group never elected again.
#[test]
fn a_first_leader_that_opened_blank_votes_for_a_candidate_ahead_of_it() {
    let mut c = Cluster::new();
    c.propose(0, 1).expect("leader accepts");
    c.settle();
    // Node 1 is cut off; nodes 2 and 3 elect and commit an entry node 1 lacks.
    c.down[0] = true;
    c.ticks(3 * ELECTION_TICKS_MAX_DEFAULT);
    let leader = (1..3)
        .find(|&n| c.nodes[n].is_leader(G))
        .expect("nodes 2 and 3 elect a leader");
    c.propose(leader, 1).expect("leader accepts");
    c.settle();
    assert_eq!(c.nodes[leader].high_watermark(G), Some(KafkaOffset(2)));
    // The new leader goes down before node 1 hears from it; node 1 comes back. The other
    // follower holds the new entry and needs node 1's vote.
    c.down[leader] = true;
    c.down[0] = false;
    let ahead = 3 - leader;
    c.ticks(5 * ELECTION_TICKS_MAX_DEFAULT);
    assert!(
        c.nodes[ahead].is_leader(G),
        "node {} (holding every committed entry) is elected with node 1's vote",
        ahead + 1
    );
}

#[test]
fn malformed_peer_entries_are_dropped() {
    let mut c = Cluster::new();
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgAppend);
    (m.from, m.to, m.term) = (1, 2, 99);
    m.mut_entries().push(Entry {
        data: Bytes::from_static(b"batch"),
        context: Bytes::from_static(b"xx"), // not a 4-byte record count
        ..Entry::default()
    });
    let batch = MessageBatch {
        from: NodeId(1),
        to: NodeId(2),
        messages: vec![GroupMessage {
            group: G,
            message: m,
        }],
    };
    let outcome = c.nodes[1].step(batch);
    assert_eq!((outcome.stepped, outcome.dropped), (0, 1));
    assert_eq!(
        c.nodes[1].term(G),
        c.nodes[0].term(G),
        "the bad message changed nothing"
    );
}

#[test]
fn a_follower_behind_the_compaction_point_installs_it_and_continues() {
    let mut c = Cluster::new();
    c.down[2] = true;
    for _ in 0..4 {
        c.propose(0, 2).expect("leader accepts");
        c.settle();
    }
    assert_eq!(c.nodes[0].high_watermark(G), Some(KafkaOffset(8)));
    let applied = c.nodes[0].applied_index(G).expect("group");
    let past = RaftIndex(applied.0 + 1);
    assert!(
        c.nodes[0].compact(G, past).is_err(),
        "never past the applied index"
    );
    c.nodes[0].compact(G, applied).expect("compacts");
    let point = c.nodes[0]
        .store(G)
        .expect("group")
        .index()
        .compaction_point();
    assert_eq!((point.index, point.kafka_end), (applied, KafkaOffset(8)));

    // Node 3 returns: the entries it needs are gone, so it gets the compaction point.
    c.down[2] = false;
    c.ticks(5);
    let store = c.nodes[2].store(G).expect("group");
    assert_eq!(store.index().compaction_point(), point);
    assert_eq!(c.nodes[2].applied_kafka_end(G), Some(KafkaOffset(8)));

    // It continues from there, and offsets stay dense when it leads.
    c.propose(0, 3).expect("leader accepts");
    c.ticks(5);
    assert_eq!(c.nodes[2].applied_kafka_end(G), Some(KafkaOffset(11)));
    c.down[0] = true;
    c.ticks(40);
    if c.nodes[1].is_leader(G) {
        c.nodes[1].transfer_leader(G, NodeId(3));
        c.ticks(5);
    }
    assert!(
        c.nodes[2].is_leader(G),
        "node 3 leads from its installed point"
    );
    let before = c.completions.len();
    c.nodes[2]
        .propose(G, Bytes::from_static(b"after"), 1)
        .expect("new leader accepts");
    c.settle();
    assert_eq!(c.completions[before].result, Ok(KafkaOffset(11)));
}

#[test]
fn a_held_write_delays_only_its_node_and_the_group_continues_after_it() {
    let mut c = Cluster::with(true);
    // Node 3's disk stalls: its writes stay in flight while the others commit.
    c.hold[2] = true;
    c.propose(0, 2).expect("leader accepts");
    c.ticks(3);
    assert_eq!(
        c.results().last().map(|r| r.1.clone()),
        Some(Ok(KafkaOffset(0)))
    );
    c.propose(0, 3).expect("leader accepts");
    // Many ticks with the write held: the group on node 3 keeps ticking but begins no new
    // Ready, and nothing panics.
    c.ticks(40);
    assert_eq!(
        c.results().last().map(|r| r.1.clone()),
        Some(Ok(KafkaOffset(2)))
    );
    assert_eq!(c.nodes[0].high_watermark(G), Some(KafkaOffset(5)));
    assert!(c.nodes[2].applied_kafka_end(G) < Some(KafkaOffset(5)));

    // The write completes: node 3 catches up, and can carry the quorum without node 1.
    c.hold[2] = false;
    c.ticks(5);
    assert_eq!(c.nodes[2].applied_kafka_end(G), Some(KafkaOffset(5)));
    c.down[0] = true;
    c.ticks(40);
    let leader = (1..3)
        .find(|&n| c.nodes[n].is_leader(G))
        .expect("node 2 or 3 leads");
    let before = c.completions.len();
    c.nodes[leader]
        .propose(G, Bytes::from_static(b"after"), 1)
        .expect("new leader accepts");
    c.settle();
    assert_eq!(c.completions[before].result, Ok(KafkaOffset(5)));
}

#[test]
fn a_store_write_without_a_ready_holds_the_groups_next_ready() {
    // The broker persists a compaction (retention) as a store write of its own, outside any
    // `Ready`. While it runs, the group must begin no `Ready`: that `Ready`'s write would
    // run beside it, and the compaction's completion would finish the `Ready` (send its
    // persisted messages, acknowledge its entries) before its own write was durable.
    let mut c = Cluster::with(true);
    c.propose(0, 2).expect("leader accepts");
    c.settle();
    let last = |c: &Cluster| c.nodes[1].store(G).map(|s| s.index().last_index());
    let before = last(&c);
    c.hold[1] = true;
    c.persisting[1].insert(G);
    c.propose(0, 3).expect("leader accepts");
    c.ticks(10);
    assert_eq!(last(&c), before, "node 2 appended nothing: no Ready began");
    assert_eq!(
        c.results().last().map(|r| r.1.clone()),
        Some(Ok(KafkaOffset(2))),
        "nodes 1 and 3 commit without node 2"
    );
    c.hold[1] = false;
    c.ticks(5);
    assert_eq!(c.nodes[1].applied_kafka_end(G), Some(KafkaOffset(5)));
}

#[test]
fn a_log_start_entry_is_applied_by_every_replica() {
    let mut c = Cluster::new();
    c.propose(0, 5).expect("leader accepts");
    c.settle();
    assert!(
        c.nodes[1].propose_log_start(G, KafkaOffset(3)).is_err(),
        "only the leader proposes"
    );
    c.nodes[0]
        .propose_log_start(G, KafkaOffset(3))
        .expect("leader accepts");
    c.ticks(3);
    assert_eq!(c.completions.len(), 2, "the log start entry completed");
    assert!(c.completions[1].result.is_ok());
    for d in c.nodes.iter_mut() {
        assert_eq!(
            d.drain_log_starts(),
            vec![(G, KafkaOffset(3))],
            "{:?}",
            d.node()
        );
        // It takes no Kafka offset: the next batch continues at 5.
        assert_eq!(d.applied_kafka_end(G), Some(KafkaOffset(5)));
    }
}

/// Moves the group from voters {1,2,3} to {2,3,4} while node 1 leads: node 4 joins as a
/// learner and replays the log from its first entry, becomes a voter, node 1 hands over
/// leadership and is removed; the group then commits without node 1, and node 4 holds
/// every entry.
#[test]
fn a_group_moves_to_new_voters_and_keeps_every_entry() {
    let mut c = Cluster::sized(4, true);
    for _ in 0..3 {
        c.propose(0, 2).expect("leader accepts");
        c.settle();
    }
    let steps = move_until_done(&mut c, &[NodeId(2), NodeId(3), NodeId(4)], false);
    assert!(
        steps
            .iter()
            .any(|s| matches!(s.1, MembershipStep::Transferring(_))),
        "node 1 left the target, so it handed leadership over: {steps:?}"
    );
    for n in 1..4 {
        let (mut voters, learners) = c.nodes[n].members(G).expect("group");
        voters.sort_unstable();
        assert_eq!(
            (voters, learners),
            (vec![2, 3, 4], vec![]),
            "node {}",
            n + 1
        );
    }
    assert_eq!(c.nodes[3].applied_kafka_end(G), Some(KafkaOffset(6)));
    c.down[0] = true;
    let leader = (1..4).find(|&n| c.nodes[n].is_leader(G)).expect("a leader");
    let before = c.completions.len();
    c.nodes[leader]
        .propose(G, Bytes::from_static(b"after"), 1)
        .expect("leader accepts");
    c.ticks(3);
    assert_eq!(c.completions[before].result, Ok(KafkaOffset(6)));
    assert_eq!(c.nodes[3].applied_kafka_end(G), Some(KafkaOffset(7)));
}

/// The controller's voter change (`move_voters`): node 4 follows as a learner and becomes a
/// voter, the leader (node 1, outside the target) hands over and is demoted to a learner,
/// which keeps following the group; the others commit without it.
#[test]
fn voters_move_and_a_demoted_voter_keeps_following() {
    let mut c = Cluster::sized(4, true);
    c.propose(0, 2).expect("leader accepts");
    c.settle();
    move_until_done(&mut c, &[NodeId(2), NodeId(3), NodeId(4)], true);
    for n in 0..4 {
        let (mut voters, learners) = c.nodes[n].members(G).expect("group");
        voters.sort_unstable();
        assert_eq!(
            (voters, learners),
            (vec![2, 3, 4], vec![1]),
            "node {}",
            n + 1
        );
    }
    let leader = (1..4).find(|&n| c.nodes[n].is_leader(G)).expect("a leader");
    c.nodes[leader]
        .propose(G, Bytes::from_static(b"after"), 1)
        .expect("leader accepts");
    c.ticks(3);
    // The demoted node still receives (and applies) what the group commits.
    assert_eq!(c.nodes[0].applied_kafka_end(G), Some(KafkaOffset(3)));
}

/// Asks whichever node leads for the next membership step toward `target` (`move_voters`
/// when `keep_learners`, else `move_members`) each tick until it is done; the steps taken,
/// as (leader node, step).
fn move_until_done(
    c: &mut Cluster,
    target: &[NodeId],
    keep_learners: bool,
) -> Vec<(usize, MembershipStep)> {
    let mut steps = Vec::new();
    for _ in 0..60 {
        let Some(leader) = (0..c.nodes.len()).find(|&n| c.nodes[n].is_leader(G)) else {
            c.ticks(1);
            continue;
        };
        let step = if keep_learners {
            c.nodes[leader].move_voters(G, target)
        } else {
            c.nodes[leader].move_members(G, target)
        };
        let step = step.expect("the leader moves members");
        steps.push((leader + 1, step));
        if step == MembershipStep::Done {
            break;
        }
        c.ticks(1);
    }
    assert_eq!(
        steps.last().map(|s| s.1),
        Some(MembershipStep::Done),
        "{steps:?}"
    );
    steps
}

/// A leader refuses to move members it does not lead, and an empty target.
#[test]
fn moving_members_needs_the_leader_and_a_target() {
    let mut c = Cluster::new();
    assert!(matches!(
        c.nodes[1].move_members(G, &[NodeId(1)]),
        Err(RaftError::NotLeader { .. })
    ));
    assert!(matches!(
        c.nodes[0].move_members(G, &[]),
        Err(RaftError::InvalidProposal { .. })
    ));
    assert_eq!(
        c.nodes[0].move_members(G, &[NodeId(1), NodeId(2), NodeId(3)]),
        Ok(MembershipStep::Done)
    );
}

/// A busy leader reports its followers in sync at every moment, also right after raft-rs's
/// check-quorum cleared its activity flags (once per election timeout): Kafka's ISR must
/// not flap in Metadata.
#[test]
fn followers_stay_in_sync_across_check_quorum() {
    let mut c = Cluster::new();
    for _ in 0..40 {
        c.propose(0, 1).expect("leader accepts");
        c.advance(TICK_INTERVAL_DEFAULT);
        // The leader ticks (check-quorum may run) before any follower answers.
        c.nodes[0].turn();
        let progress = c.nodes[0].voter_progress(G).expect("leads");
        assert!(
            progress.iter().all(|&(_, _, active)| active),
            "a follower read inactive: {progress:?}"
        );
        assert!(c.nodes[0].voter_in_sync(G, NodeId(2)));
        assert_eq!(c.nodes[0].lagging_voters(G), Some(0));
        c.settle();
    }
}

/// Group commit pacing (`DriverConfig::sync_min_interval`): a lone write begins at once;
/// proposals made within the interval after it wait and go into one later write, released
/// at `next_wake_at`; all of them commit.
#[test]
fn paced_groups_gather_proposals_into_one_write_per_interval() {
    const PACE: Duration = Duration::from_millis(5);
    let mut c = Cluster::configured(3, true, |cfg| cfg.sync_min_interval = PACE);
    // Quiet: the leader's last write began an interval or more ago.
    for quiet in 0.. {
        assert!(quiet < 20, "the leader kept writing");
        let w = c.writes[0];
        c.advance(PACE);
        c.settle();
        if c.writes[0] == w {
            break;
        }
    }
    let (writes, done) = (c.writes[0], c.completions.len());
    c.propose(0, 1).expect("leader accepts");
    c.settle();
    assert_eq!(c.writes[0], writes + 1, "a lone write waits for nothing");
    for _ in 0..9 {
        c.propose(0, 1).expect("leader accepts");
        c.settle();
    }
    assert_eq!(c.writes[0], writes + 1, "a write began within the interval");
    let now = c.clock.now();
    assert_eq!(
        c.nodes[0].next_wake_at(),
        now + PACE,
        "the release is the next wake"
    );
    let mut intervals = 0;
    while c.completions.len() < done + 10 {
        assert!(
            intervals < 10,
            "the proposals never committed: {:?}",
            c.results()
        );
        c.advance(PACE);
        c.settle();
        intervals += 1;
    }
    assert!(
        c.results()[done..].iter().all(|(_, r)| r.is_ok()),
        "{:?}",
        c.results()
    );
    assert!(
        c.writes[0] - writes <= intervals + 1,
        "{} leader writes in {intervals} intervals",
        c.writes[0] - writes
    );
}

/// A paced leader that writes all the time still ticks: cut off from both followers while a
/// client keeps proposing, it steps down (check-quorum) as an unpaced one does. Each tick
/// here falls inside the pacing interval of a write begun just before it.
#[test]
fn a_busy_paced_leader_cut_off_still_steps_down() {
    const PACE: Duration = Duration::from_millis(5);
    let mut c = Cluster::configured(3, true, |cfg| cfg.sync_min_interval = PACE);
    c.down[1] = true;
    c.down[2] = true;
    let ms = Duration::from_millis(1);
    for _ in 0..(ELECTION_TICKS_MAX_DEFAULT * 3) {
        if !c.nodes[0].is_leader(G) {
            return;
        }
        c.advance(TICK_INTERVAL_DEFAULT - ms);
        let _ = c.propose(0, 1);
        c.settle();
        c.advance(ms);
        c.settle();
    }
    panic!("a leader cut off from its quorum while writing stayed leader");
}

/// A node hearing from none of its peers for an election timeout is isolated (Metadata
/// then names stand-in leaders); one peer heard again ends that.
#[test]
fn a_node_that_hears_no_peer_is_isolated_until_one_answers() {
    let mut c = Cluster::new();
    assert!(!c.nodes[0].isolated(), "heard from both followers");
    c.down[1] = true;
    c.ticks(ELECTION_TICKS_MAX_DEFAULT * 2);
    assert!(!c.nodes[0].isolated(), "node 3 still answers");
    c.down[2] = true;
    c.ticks(ELECTION_TICKS_MAX_DEFAULT * 2);
    assert!(
        c.nodes[0].isolated(),
        "no peer heard for an election timeout"
    );
    c.down[2] = false;
    c.ticks(ELECTION_TICKS_MAX_DEFAULT);
    assert!(!c.nodes[0].isolated(), "node 3 answers again");
}
