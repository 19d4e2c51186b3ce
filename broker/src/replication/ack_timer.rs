//! Leader-side timing of follower acknowledgements (`strand_raft_append_ack_seconds`): when
//! an append carrying entries leaves for a follower, its last index and the time are kept
//! per (group, follower); when that follower accepts an index at or past it, the time since
//! is observed: the network both ways, the follower's queue and its durable write, the part
//! of an `acks=all` produce this node does not see otherwise.
//!
//! Invariant: at most `PENDING_PER_FOLLOWER_MAX` sends are kept per (group, follower),
//! oldest dropped first (a follower that stops answering costs that much and no more), and
//! none of a group this shard no longer hosts (`forget`); a rejected append observes
//! nothing, and each send is observed at most once.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use raft::eraftpb::MessageType;
use strand_raft::{GroupId, MessageBatch, NodeId};

use crate::common::metrics::{Histogram, HistogramSnapshot};

/// Sends remembered per (group, follower): raft-rs keeps at most 256 appends in flight per
/// follower; 64 covers a replicating follower at its usual depth.
const PENDING_PER_FOLLOWER_MAX: usize = 64;

/// See the module doc.
#[derive(Default)]
pub struct AckTimer {
    pending: HashMap<(GroupId, NodeId), VecDeque<(u64, Instant)>>,
    acks: Histogram,
}

impl AckTimer {
    /// Notes the appends with entries in a batch leaving this node.
    pub fn sent(&mut self, batch: &MessageBatch, now: Instant) {
        for m in &batch.messages {
            let msg = &m.message;
            let Some(last) = msg.entries.last() else {
                continue;
            };
            if msg.get_msg_type() != MessageType::MsgAppend {
                continue;
            }
            let q = self.pending.entry((m.group, batch.to)).or_default();
            if q.len() == PENDING_PER_FOLLOWER_MAX {
                q.pop_front();
            }
            q.push_back((last.index, now));
        }
    }

    /// Observes the sends that the accepted append answers in a batch arriving here
    /// acknowledge.
    pub fn received(&mut self, batch: &MessageBatch, now: Instant) {
        for m in &batch.messages {
            let msg = &m.message;
            if msg.get_msg_type() != MessageType::MsgAppendResponse || msg.reject {
                continue;
            }
            let key = (m.group, batch.from);
            let Some(q) = self.pending.get_mut(&key) else {
                continue;
            };
            while let Some(&(index, at)) = q.front() {
                if index > msg.index {
                    break;
                }
                q.pop_front();
                self.acks.observe(now.saturating_duration_since(at));
            }
            if q.is_empty() {
                self.pending.remove(&key);
            }
        }
    }

    /// Drops the sends of `group` still waiting (the shard stopped hosting it).
    pub fn forget(&mut self, group: GroupId) {
        self.pending.retain(|(g, _), _| *g != group);
    }

    /// The acknowledgement times observed so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        self.acks.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{Entry, Message};
    use std::time::Duration;
    use strand_raft::GroupMessage;

    fn batch(from: u64, to: u64, messages: Vec<Message>) -> MessageBatch {
        MessageBatch {
            from: NodeId(from),
            to: NodeId(to),
            messages: messages
                .into_iter()
                .map(|message| GroupMessage {
                    group: GroupId(7),
                    message,
                })
                .collect(),
        }
    }

    fn append(last: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.mut_entries().push(Entry {
            index: last,
            ..Entry::default()
        });
        m
    }

    fn answer(index: u64, reject: bool) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppendResponse);
        m.index = index;
        m.reject = reject;
        m
    }

    #[test]
    fn an_accepted_answer_times_the_appends_it_covers_once() {
        let mut t = AckTimer::default();
        let t0 = crate::common::clock::now();
        t.sent(&batch(1, 2, vec![append(5), append(6)]), t0);
        // A heartbeat-like append without entries is not timed.
        t.sent(&batch(1, 2, vec![Message::default()]), t0);
        let ms = |n| t0 + Duration::from_millis(n);
        t.received(&batch(2, 1, vec![answer(6, true)]), ms(1));
        assert_eq!(t.snapshot().count(), 0, "a rejection observes nothing");
        t.received(&batch(3, 1, vec![answer(6, false)]), ms(1));
        assert_eq!(t.snapshot().count(), 0, "another follower's answer");
        t.received(&batch(2, 1, vec![answer(5, false)]), ms(2));
        assert_eq!(t.snapshot().count(), 1);
        t.received(
            &batch(2, 1, vec![answer(6, false), answer(6, false)]),
            ms(3),
        );
        assert_eq!(t.snapshot().count(), 2, "each send once");
        assert!(t.pending.is_empty());
    }

    #[test]
    fn a_silent_follower_holds_a_bounded_number_of_sends() {
        let mut t = AckTimer::default();
        let t0 = crate::common::clock::now();
        for i in 0..1000 {
            t.sent(&batch(1, 2, vec![append(i + 1)]), t0);
        }
        let q = &t.pending[&(GroupId(7), NodeId(2))];
        assert_eq!(q.len(), PENDING_PER_FOLLOWER_MAX);
        assert_eq!(
            q.front().map(|e| e.0),
            Some(1000 - PENDING_PER_FOLLOWER_MAX as u64 + 1)
        );
        t.forget(GroupId(8));
        assert_eq!(t.pending.len(), 1, "another group's sends stay");
        t.forget(GroupId(7));
        assert!(t.pending.is_empty());
    }
}
