//! The group coordinator (the classic rebalance protocol and KIP-848 consumer groups) and
//! committed offsets (ARCHITECTURE.md, Kafka gateway: Consumer groups).
//!
//! A group lives on the shard owning `__consumer_offsets` partition
//! `abs(java_hash(group)) % N`. Offset commits and group metadata are records in that
//! partition, written with acks=all before they are acknowledged, and replayed when the
//! partition opens, so coordinator state survives kill -9.
//!
//! `state` holds the pure data and decisions; `coordinator` the request handling with
//! waiters and timers; `records` the record format and replay; `consumer` and
//! `heartbeat` the same two for groups of the consumer protocol (KIP-848).
//!
//! May use: `common`, `runtime`, `partition`, `replication`, `cluster`. The coordinator
//! runs over the shard that owns the groups through [`GroupHost`], which the shard
//! implements.

pub mod consumer;
pub mod coordinator;
pub mod heartbeat;
pub mod records;
pub mod state;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::cluster::metadata::Metadata;
pub use crate::common::config::OFFSETS_TOPIC;
use crate::partition::Partition;

/// What the coordinator uses of the shard it runs on (`shard::Shard` implements it).
pub trait GroupHost: 'static {
    /// The groups this shard coordinates, by id.
    fn groups(&self) -> &RefCell<HashMap<String, state::Group>>;
    /// Kafka's `group.initial.rebalance.delay.ms` as configured.
    fn initial_rebalance_delay_ms(&self) -> u64;
    /// Members and pending member ids one group may hold (`group.max.size`).
    fn group_max_size(&self) -> usize;
    /// Groups this shard may coordinate (`groups_per_shard`); loading never refuses one.
    fn groups_max(&self) -> usize;
    /// `group.consumer.session.timeout.ms` as configured.
    fn consumer_session_timeout_ms(&self) -> u64;
    /// The metadata snapshot this shard applied.
    fn metadata(&self) -> Arc<Metadata>;
    /// Partition `index` of `topic`, if open on this shard.
    fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>>;
}

/// Java's `String.hashCode` over UTF-16 code units, as Kafka uses for placement.
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition of `group` among `partitions`.
pub fn partition_for(group: &str, partitions: usize) -> i32 {
    let n = i32::try_from(partitions.max(1)).unwrap_or(i32::MAX);
    (java_hash(group) & 0x7fff_ffff) % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_matches_kafka() {
        // Java: "test".hashCode() == 3556498, "polygenelubricants".hashCode() == i32::MIN.
        assert_eq!(java_hash("test"), 3_556_498);
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("ab"), 97 * 31 + 98);
        assert!((0..50).contains(&partition_for("my-group", 50)));
    }
}
