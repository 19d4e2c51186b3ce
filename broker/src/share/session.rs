//! Share sessions (KIP-932): what a member fetches from one broker, and the epoch that
//! orders its ShareFetch and ShareAcknowledge requests there. Pure data and decisions.
//!
//! Invariants: epoch 0 opens a session (replacing the member's old one) holding exactly
//! the partitions it names, and carries no acknowledgement; epoch n > 0 must be the
//! session's next epoch, after which the next is n + 1 (1 after `i32::MAX`); epoch -1
//! closes it, and the member's acquired records on its partitions go back. A request
//! refused here changes nothing and its acknowledgements are not applied.

use std::collections::{BTreeSet, HashMap};

use crate::common::errors::code;

/// The epoch that opens a session.
pub const OPEN_EPOCH: i32 = 0;
/// The epoch that closes one.
pub const FINAL_EPOCH: i32 = -1;
/// Sessions one broker shard keeps (Kafka's `group.share.max.share.sessions` default): a
/// new one past it is refused SHARE_SESSION_LIMIT_REACHED. A session ends when its member
/// closes it; one whose member vanished stays until the member opens a new one.
pub const SESSIONS_MAX: usize = 2000;

/// A topic partition by name.
pub type TopicPartition = (String, i32);

/// One member's session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareSession {
    /// The epoch its next request must carry.
    pub next_epoch: i32,
    /// The partitions it fetches.
    pub partitions: BTreeSet<TopicPartition>,
    /// The connection that opened it: the session ends with it.
    pub conn: u64,
}

/// What a request does to its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Go on with these partitions (fetch them, for a ShareFetch).
    Fetch(BTreeSet<TopicPartition>),
    /// The session ended: fetch nothing; the member's records on these partitions go back.
    Close(BTreeSet<TopicPartition>),
}

/// The sessions of one broker shard, by (group, member).
#[derive(Clone, Debug, Default)]
pub struct Sessions {
    by_member: HashMap<(String, String), ShareSession>,
}

impl Sessions {
    /// A ShareFetch with `epoch`, naming `added` and `forgotten` partitions; `acks`: it
    /// carries acknowledgements. Err: the top-level error code.
    pub fn fetch(
        &mut self,
        member: (&str, &str),
        epoch: i32,
        (added, forgotten): (&[TopicPartition], &[TopicPartition]),
        acks: bool,
        conn: u64,
    ) -> Result<Step, i16> {
        let key = (member.0.to_string(), member.1.to_string());
        if epoch == OPEN_EPOCH {
            if acks {
                return Err(code::INVALID_REQUEST);
            }
            if !self.by_member.contains_key(&key) && self.by_member.len() >= SESSIONS_MAX {
                return Err(code::SHARE_SESSION_LIMIT_REACHED);
            }
            let s = ShareSession {
                next_epoch: 1,
                partitions: added.iter().cloned().collect(),
                conn,
            };
            let partitions = s.partitions.clone();
            self.by_member.insert(key, s);
            return Ok(Step::Fetch(partitions));
        }
        if epoch == FINAL_EPOCH {
            let s = self
                .by_member
                .remove(&key)
                .ok_or(code::SHARE_SESSION_NOT_FOUND)?;
            return Ok(Step::Close(s.partitions));
        }
        let s = self.advance(&key, epoch)?;
        s.partitions.extend(added.iter().cloned());
        for tp in forgotten {
            s.partitions.remove(tp);
        }
        Ok(Step::Fetch(s.partitions.clone()))
    }

    /// A ShareAcknowledge with `epoch`. Err: the top-level error code.
    pub fn acknowledge(&mut self, member: (&str, &str), epoch: i32) -> Result<Step, i16> {
        let key = (member.0.to_string(), member.1.to_string());
        match epoch {
            OPEN_EPOCH => Err(code::INVALID_SHARE_SESSION_EPOCH),
            FINAL_EPOCH => {
                let s = self
                    .by_member
                    .remove(&key)
                    .ok_or(code::SHARE_SESSION_NOT_FOUND)?;
                Ok(Step::Close(s.partitions))
            }
            _ => Ok(Step::Fetch(self.advance(&key, epoch)?.partitions.clone())),
        }
    }

    /// Ends the sessions connection `conn` opened: `((group, member), partitions)` of
    /// each, whose acquired records go back (Kafka releases them when the connection ends).
    pub fn closed(&mut self, conn: u64) -> Vec<((String, String), BTreeSet<TopicPartition>)> {
        let keys: Vec<(String, String)> = self
            .by_member
            .iter()
            .filter(|(_, s)| s.conn == conn)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let s = self.by_member.remove(&k)?;
                Some((k, s.partitions))
            })
            .collect()
    }

    /// Sessions open.
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    fn advance(&mut self, key: &(String, String), epoch: i32) -> Result<&mut ShareSession, i16> {
        let s = self
            .by_member
            .get_mut(key)
            .ok_or(code::SHARE_SESSION_NOT_FOUND)?;
        if s.next_epoch != epoch {
            return Err(code::INVALID_SHARE_SESSION_EPOCH);
        }
        s.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("t".to_string(), p)
    }

    const M: (&str, &str) = ("g", "m");

    #[test]
    fn a_session_opens_advances_and_closes_in_epoch_order() {
        let mut s = Sessions::default();
        assert_eq!(
            s.fetch(M, 1, (&[tp(0)], &[]), false, 1),
            Err(code::SHARE_SESSION_NOT_FOUND)
        );
        let opened = s.fetch(M, 0, (&[tp(0), tp(1)], &[]), false, 1);
        assert_eq!(opened, Ok(Step::Fetch([tp(0), tp(1)].into())));
        assert_eq!(
            s.fetch(M, 2, (&[], &[]), true, 1),
            Err(code::INVALID_SHARE_SESSION_EPOCH)
        );
        let next = s.fetch(M, 1, (&[tp(2)], &[tp(0)]), true, 1);
        assert_eq!(next, Ok(Step::Fetch([tp(1), tp(2)].into())));
        assert_eq!(s.acknowledge(M, 2), Ok(Step::Fetch([tp(1), tp(2)].into())));
        assert_eq!(s.acknowledge(M, -1), Ok(Step::Close([tp(1), tp(2)].into())));
        assert!(s.is_empty());
        assert_eq!(s.acknowledge(M, -1), Err(code::SHARE_SESSION_NOT_FOUND));
    }

    #[test]
    fn an_opening_request_carries_no_acknowledgement_and_replaces_the_old_session() {
        let mut s = Sessions::default();
        assert_eq!(
            s.fetch(M, 0, (&[tp(0)], &[]), true, 1),
            Err(code::INVALID_REQUEST)
        );
        assert!(s.is_empty());
        s.fetch(M, 0, (&[tp(0)], &[]), false, 1).unwrap();
        s.fetch(M, 1, (&[], &[]), false, 1).unwrap();
        assert_eq!(
            s.fetch(M, 0, (&[tp(3)], &[]), false, 1),
            Ok(Step::Fetch([tp(3)].into()))
        );
        assert_eq!(
            s.fetch(M, 1, (&[], &[]), false, 1),
            Ok(Step::Fetch([tp(3)].into()))
        );
        assert_eq!(s.acknowledge(M, 0), Err(code::INVALID_SHARE_SESSION_EPOCH));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_connection_that_ends_takes_its_sessions_along() {
        let mut s = Sessions::default();
        s.fetch(("g", "a"), 0, (&[tp(0)], &[]), false, 7).unwrap();
        s.fetch(("g", "b"), 0, (&[tp(1)], &[]), false, 8).unwrap();
        let gone = s.closed(7);
        assert_eq!(gone, vec![(("g".into(), "a".into()), [tp(0)].into())]);
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.fetch(("g", "a"), 1, (&[], &[]), false, 7),
            Err(code::SHARE_SESSION_NOT_FOUND)
        );
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        let mut s = Sessions::default();
        s.fetch(M, 0, (&[tp(0)], &[]), false, 1).unwrap();
        s.by_member
            .get_mut(&("g".into(), "m".into()))
            .unwrap()
            .next_epoch = i32::MAX;
        s.fetch(M, i32::MAX, (&[], &[]), false, 1).unwrap();
        assert!(s.fetch(M, 1, (&[], &[]), false, 1).is_ok());
    }
}
