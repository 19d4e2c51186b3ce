//! The simulator's invariant checker (issue 5, "Deterministic simulation"). It is fed each
//! node's state after every step and fails on the first violation:
//!
//! - committed entries never change: every entry any node applies matches, index for index,
//!   the first applied copy (term, payload, record count) -- logs agree on the committed
//!   prefix;
//! - Kafka offsets are dense and assigned once: each applied entry's offset range follows its
//!   predecessor's and is the same on every node;
//! - every acknowledged proposal is committed at the offset it was acknowledged with;
//! - at most one leader per term;
//! - the high watermark a leader serves never falls below one served in an earlier term,
//!   and a node's committed end never goes back within one incarnation;
//! - no committed entry is lost: each is in the durable image of a majority, and already
//!   was when its proposal was acknowledged (acks=all never completes before a majority
//!   fsync).
//!
//! Invariant: `truth[g]` holds, for raft index `k + 1`, the first applied copy of that entry.

use std::collections::BTreeMap;

use bytes::Bytes;
use raft::eraftpb::Entry;

use crate::entry;
use crate::error::StoreError;
use crate::log_index::LogIndex;
use crate::types::{GroupId, KafkaOffset, NodeId, RaftIndex, RaftTerm};

/// A committed entry as first seen.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Committed {
    term: u64,
    data: Bytes,
    context: Bytes,
    kafka_end: KafkaOffset,
}

/// Per (node, group) progress of the checker within one node incarnation.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    applied: RaftIndex,
    kafka_end: KafkaOffset,
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct Checker {
    truth: BTreeMap<GroupId, Vec<Committed>>,
    /// Where each payload was committed: (group, raft index).
    committed_at: BTreeMap<Bytes, (GroupId, RaftIndex)>,
    leaders: BTreeMap<(GroupId, RaftTerm), NodeId>,
    /// Lowest and highest high watermark served by the leader of each term.
    served_hw: BTreeMap<(GroupId, RaftTerm), (KafkaOffset, KafkaOffset)>,
    seen: BTreeMap<(NodeId, GroupId), Seen>,
    /// Acknowledged payloads and their base offsets.
    acked: BTreeMap<Bytes, (GroupId, KafkaOffset)>,
}

/// Reads a store's entries `lo..hi` (`GroupView::read`).
pub type ReadEntries<'a> = dyn FnMut(RaftIndex, RaftIndex) -> Result<Vec<Entry>, String> + 'a;

/// A node's view of one group, as the checker reads it.
pub struct GroupView<'a> {
    pub node: NodeId,
    pub group: GroupId,
    /// The store's index (terms and Kafka offsets).
    pub index: &'a LogIndex,
    /// The store's entries `lo..hi`, canonical (`SimStore::canonical`), so that copies
    /// of one entry compare equal across nodes and with the client's payloads.
    pub read: &'a mut ReadEntries<'a>,
    pub applied: RaftIndex,
    pub leader_term: Option<RaftTerm>,
    pub served_hw: Option<KafkaOffset>,
}

impl Checker {
    /// A node restarted: its progress is relearned from scratch.
    pub fn forget_node(&mut self, node: NodeId) {
        self.seen.retain(|&(n, _), _| n != node);
    }

    /// Checks a node's view of a group after a step.
    pub fn check_view(&mut self, v: &mut GroupView<'_>) -> Result<(), String> {
        self.check_applied(v)?;
        if let Some(term) = v.leader_term {
            let first = *self.leaders.entry((v.group, term)).or_insert(v.node);
            if first != v.node {
                return Err(format!(
                    "two leaders in {} term {}: {} and {}",
                    v.group, term.0, first, v.node
                ));
            }
            if let Some(hw) = v.served_hw {
                self.check_served_hw(v.group, term, hw)?;
            }
        }
        Ok(())
    }

    fn check_applied(&mut self, v: &mut GroupView<'_>) -> Result<(), String> {
        let seen = self.seen.entry((v.node, v.group)).or_default();
        if v.applied < seen.applied {
            return Err(format!("{} {} applied went back", v.node, v.group));
        }
        let lo = RaftIndex(seen.applied.0.max(v.index.first_index().0 - 1) + 1);
        let hi = RaftIndex(v.applied.0 + 1);
        let entries = (v.read)(lo, hi)
            .map_err(|e| format!("{} {} applied entries unreadable: {e}", v.node, v.group))?;
        let truth = self.truth.entry(v.group).or_default();
        for e in &entries {
            let kafka_end = match v.index.kafka_end_at(RaftIndex(e.index)) {
                Ok(end) => end,
                // Sealed behind the applied index: its end follows from the agreed prefix
                // (the store's own end at the applied index is still checked below it).
                Err(StoreError::Sealed { .. }) => sealed_end(truth, v, e)?,
                Err(e) => return Err(e.to_string()),
            };
            agree(truth, &mut self.committed_at, v, e, kafka_end)?;
        }
        let seen = self.seen.entry((v.node, v.group)).or_default();
        let kafka_end = v.index.kafka_end_at(v.applied).map_err(|e| e.to_string())?;
        if kafka_end < seen.kafka_end {
            return Err(format!("{} {} committed end went back", v.node, v.group));
        }
        *seen = Seen {
            applied: v.applied,
            kafka_end,
        };
        Ok(())
    }

    fn check_served_hw(
        &mut self,
        group: GroupId,
        term: RaftTerm,
        hw: KafkaOffset,
    ) -> Result<(), String> {
        let truth_end = self
            .truth
            .get(&group)
            .and_then(|t| t.last())
            .map_or(KafkaOffset(0), |c| c.kafka_end);
        if hw > truth_end {
            return Err(format!(
                "{group} term {} serves hw {hw:?} past committed {truth_end:?}",
                term.0
            ));
        }
        let range = self.served_hw.entry((group, term)).or_insert((hw, hw));
        range.0 = range.0.min(hw);
        range.1 = range.1.max(hw);
        let (lo, hi) = *range;
        for (&(g, t), &(t_lo, t_hi)) in self.served_hw.range((group, RaftTerm(0))..) {
            if g != group {
                break;
            }
            let backwards = (t < term && t_hi > lo) || (t > term && t_lo < hi);
            if backwards {
                return Err(format!(
                    "{group} hw went back across leaders: term {} served {:?}..={:?}, term {} served {:?}..={:?}",
                    t.0, t_lo, t_hi, term.0, lo, hi
                ));
            }
        }
        Ok(())
    }

    /// A client was told `payload` committed at `base` in `group`.
    pub fn on_ack(
        &mut self,
        group: GroupId,
        payload: &Bytes,
        base: KafkaOffset,
    ) -> Result<(), String> {
        let Some(&(g, index)) = self.committed_at.get(payload) else {
            return Err(format!(
                "{group} acknowledged a payload no node applied (base {base:?})"
            ));
        };
        let truth = &self.truth[&g];
        let k = usize::try_from(index.0 - 1).map_err(|e| e.to_string())?;
        let prev_end = if k == 0 {
            KafkaOffset(0)
        } else {
            truth[k - 1].kafka_end
        };
        if g != group || prev_end != base {
            return Err(format!(
                "{group} acknowledged base {base:?}, committed in {g} at {prev_end:?}"
            ));
        }
        if self.acked.insert(payload.clone(), (group, base)).is_some() {
            return Err(format!("{group} acknowledged one payload twice"));
        }
        Ok(())
    }

    /// Where `payload` was committed: its group, raft index and term.
    pub fn committed_entry(&self, payload: &Bytes) -> Option<(GroupId, RaftIndex, u64)> {
        let &(g, index) = self.committed_at.get(payload)?;
        let k = usize::try_from(index.0.checked_sub(1)?).ok()?;
        Some((g, index, self.truth.get(&g)?.get(k)?.term))
    }

    /// Acknowledged payloads: (payload, group, base offset).
    pub fn acked(&self) -> impl Iterator<Item = (&Bytes, GroupId, KafkaOffset)> + '_ {
        self.acked.iter().map(|(p, &(g, o))| (p, g, o))
    }

    /// Committed entries of `group` are each durable on at least `majority` of the
    /// `nodes` nodes: `holds(k, index, term)` says whether the `k`-th node's disk holds
    /// raft index `index` with `term`.
    pub fn check_durable(
        &self,
        group: GroupId,
        holds: impl Fn(usize, u64, u64) -> bool,
        nodes: usize,
        majority: usize,
    ) -> Result<(), String> {
        let Some(truth) = self.truth.get(&group) else {
            return Ok(());
        };
        for (k, c) in truth.iter().enumerate() {
            let index = k as u64 + 1;
            let holders = (0..nodes).filter(|&k| holds(k, index, c.term)).count();
            if holders < majority {
                return Err(format!(
                    "lost write: {group} committed raft index {index} (term {}) is durable on {holders} of {} nodes",
                    c.term,
                    nodes
                ));
            }
        }
        Ok(())
    }

    /// Acknowledged payloads of `group`.
    pub fn acked_in(&self, group: GroupId) -> usize {
        self.acked.values().filter(|&&(g, _)| g == group).count()
    }

    /// Committed entries so far, over all groups.
    pub fn committed_count(&self) -> usize {
        self.truth.values().map(Vec::len).sum()
    }
}

/// Checks (or records) one applied entry against the first applied copy.
/// The Kafka end of a sealed entry from the committed truth: its predecessor's end plus
/// its records.
fn sealed_end(truth: &[Committed], v: &GroupView<'_>, e: &Entry) -> Result<KafkaOffset, String> {
    let kind =
        entry::classify(e).map_err(|why| format!("{} applied a malformed entry: {why}", v.node))?;
    let k = usize::try_from(e.index - 1).map_err(|e| e.to_string())?;
    let prev = if k == 0 {
        Some(KafkaOffset(0))
    } else {
        truth.get(k - 1).map(|c| c.kafka_end)
    };
    let prev = prev.ok_or_else(|| {
        format!(
            "{} {} raft index {} is sealed and its predecessor unknown",
            v.node, v.group, e.index
        )
    })?;
    Ok(KafkaOffset(prev.0 + i64::from(kind.record_count())))
}

fn agree(
    truth: &mut Vec<Committed>,
    committed_at: &mut BTreeMap<Bytes, (GroupId, RaftIndex)>,
    v: &GroupView<'_>,
    e: &Entry,
    kafka_end: KafkaOffset,
) -> Result<(), String> {
    let k = usize::try_from(e.index - 1).map_err(|e| e.to_string())?;
    let kind =
        entry::classify(e).map_err(|why| format!("{} applied a malformed entry: {why}", v.node))?;
    let prev_end = if k == 0 {
        KafkaOffset(0)
    } else {
        truth.get(k - 1).map_or(KafkaOffset(-1), |c| c.kafka_end)
    };
    if kafka_end.0 != prev_end.0 + i64::from(kind.record_count()) {
        return Err(format!(
            "{} {} raft index {}: kafka end {kafka_end:?} does not follow {prev_end:?} (offsets not dense)",
            v.node, v.group, e.index
        ));
    }
    let mine = Committed {
        term: e.term,
        data: e.data.clone(),
        context: e.context.clone(),
        kafka_end,
    };
    match truth.get(k) {
        Some(first) if *first == mine => Ok(()),
        Some(first) => Err(format!(
            "{} {} committed raft index {} changed: term {} end {:?} became term {} end {:?}",
            v.node, v.group, e.index, first.term, first.kafka_end, mine.term, mine.kafka_end
        )),
        None if k == truth.len() => {
            // Client payloads are unique; configuration changes are not (a new leader may
            // propose the same change again, and every automatic leave is alike).
            let config = matches!(kind, entry::EntryKind::Config);
            if !mine.data.is_empty()
                && !config
                && committed_at
                    .insert(mine.data.clone(), (v.group, RaftIndex(e.index)))
                    .is_some()
            {
                return Err(format!("{} one payload committed twice", v.group));
            }
            truth.push(mine);
            Ok(())
        }
        None => Err(format!(
            "{} {} applied raft index {} past the committed prefix",
            v.node, v.group, e.index
        )),
    }
}
