//! Where the coordinator of a key of an internal topic runs (a group of
//! `__consumer_offsets`, a transactional id of `__transaction_state`): the shard owning
//! the key's partition, once that partition is open and replayed there and, in a
//! cluster, while this node leads it.
//!
//! Invariant: a coordinator never answers from a partition's state before it is loaded
//! (COORDINATOR_LOAD_IN_PROGRESS) nor after this node stopped leading it
//! (NOT_COORDINATOR).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

use super::{Shard, GROUP_LOAD_WAIT};
use crate::common::errors::code;
use crate::runtime::task::sleep;

impl Shard {
    /// The shard of this node owning the partition of `key` in the internal `topic`, if
    /// the topic exists.
    pub fn coordinator_shard(&self, topic: &str, key: &str) -> Option<usize> {
        let meta = self.metadata();
        let t = meta.topics.get(topic)?;
        meta.shard_of(topic, crate::group::partition_for(key, t.shards.len()))
    }

    /// Whether this shard coordinates `key` of the internal `topic` now: once the
    /// partition is open here and not in `loading` (COORDINATOR_LOAD_IN_PROGRESS
    /// meanwhile); in a cluster only while this node leads it (NOT_COORDINATOR
    /// otherwise: a follower's state is stale, and one that lost the leadership must not
    /// answer beside the new coordinator). Clients look the coordinator up again on
    /// either.
    pub(crate) fn coordinator_check_in(
        &self,
        topic: &str,
        key: &str,
        loading: &RefCell<BTreeSet<i32>>,
    ) -> Result<(), i16> {
        let meta = self.metadata();
        let Some(t) = meta.topics.get(topic) else {
            return Err(code::COORDINATOR_NOT_AVAILABLE);
        };
        let p = crate::group::partition_for(key, t.shards.len());
        match self.partitions.borrow().get(&(topic.to_string(), p)) {
            Some(part) if part.serving() => {
                if loading.borrow().contains(&p) {
                    Err(code::COORDINATOR_LOAD_IN_PROGRESS)
                } else {
                    Ok(())
                }
            }
            Some(_) => Err(code::NOT_COORDINATOR),
            None if self.clustered() => Err(code::NOT_COORDINATOR),
            None => Err(code::COORDINATOR_LOAD_IN_PROGRESS),
        }
    }

    /// Waits (bounded by GROUP_LOAD_WAIT) until the partition of `key` in the internal
    /// `topic` is open on this shard (after a restart, or right after the topic was
    /// created), so a request waits instead of being answered from nothing (Kafka answers
    /// COORDINATOR_LOAD_IN_PROGRESS; waiting is invisible to clients).
    pub async fn wait_loaded(&self, topic: &str, key: &str) {
        let deadline = crate::common::clock::now() + GROUP_LOAD_WAIT;
        while crate::common::clock::now() < deadline && !self.stopping() {
            let meta = self.metadata();
            let settled = meta.version > 0 && !self.applying_metadata.get();
            if let Some(t) = meta.topics.get(topic).filter(|_| settled) {
                let p = crate::group::partition_for(key, t.shards.len());
                if self
                    .partitions
                    .borrow()
                    .contains_key(&(topic.to_string(), p))
                {
                    return;
                }
            }
            sleep(Duration::from_millis(10)).await;
        }
    }
}
