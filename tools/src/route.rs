//! Routing a topic's partitions to their leaders: on a cluster each partition has its own
//! leader, and a broker that does not lead a partition answers NOT_LEADER_OR_FOLLOWER.
//! Metadata (through the `--brokers` connection) names each partition's leader and each
//! broker's address; requests for a partition go to a connection to its leader, opened on
//! first use and kept.
//!
//! Invariant: `leaders` and `brokers` are from the latest Metadata answer; at most one
//! connection is kept per broker id.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::kafka::{KafkaClient, KafkaError};

/// Metadata refreshes a command makes while partitions move before it gives up.
pub const REFRESHES_MAX: u32 = 10;
/// Wait before each refresh after a leader change, so an election can finish.
pub const REFRESH_BACKOFF: Duration = Duration::from_millis(300);

/// Kafka error codes after which a request goes to the partition's new leader.
pub fn leader_moved(code: i16) -> bool {
    // LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
    matches!(code, 5 | 6 | 74)
}

/// See the module doc.
pub struct Router {
    topic: String,
    timeout: Duration,
    partitions: usize,
    leaders: BTreeMap<i32, i32>,
    brokers: BTreeMap<i32, String>,
    conns: BTreeMap<i32, KafkaClient>,
    refreshes: u32,
}

impl Router {
    /// Routes `topic` from the Metadata `seed` answers (creating the topic when
    /// `auto_create` and the broker allows it).
    pub fn new(
        seed: &mut KafkaClient,
        topic: &str,
        auto_create: bool,
    ) -> Result<Router, KafkaError> {
        let mut r = Router {
            topic: topic.to_string(),
            timeout: seed.timeout(),
            partitions: 0,
            leaders: BTreeMap::new(),
            brokers: BTreeMap::new(),
            conns: BTreeMap::new(),
            refreshes: 0,
        };
        r.load(seed, auto_create)?;
        Ok(r)
    }

    fn load(&mut self, seed: &mut KafkaClient, auto_create: bool) -> Result<(), KafkaError> {
        let resp =
            crate::topic::metadata(seed, Some(std::slice::from_ref(&self.topic)), auto_create)?;
        let t = crate::topic::topic_of(&resp, &self.topic)?;
        self.partitions = t.partitions.len();
        self.leaders = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect();
        self.brokers = crate::topic::broker_addrs(&resp);
        // A broker that left (or moved) is reconnected when used again.
        let brokers = &self.brokers;
        self.conns
            .retain(|id, c| brokers.get(id).is_some_and(|a| a == c.addr()));
        Ok(())
    }

    /// Partitions of the topic.
    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// The leader of `partition`, `None` while it has none.
    pub fn leader_of(&self, partition: i32) -> Option<i32> {
        self.leaders.get(&partition).copied().filter(|&l| l >= 0)
    }

    /// After a leader moved: waits `REFRESH_BACKOFF` and reloads the Metadata; once
    /// `REFRESHES_MAX` refreshes were made, fails with `why` instead.
    pub fn refresh(&mut self, seed: &mut KafkaClient, why: KafkaError) -> Result<(), KafkaError> {
        if self.refreshes >= REFRESHES_MAX {
            return Err(why);
        }
        self.refreshes += 1;
        std::thread::sleep(REFRESH_BACKOFF);
        self.load(seed, false)
    }

    /// The connection to broker `leader`, opened on first use.
    pub fn client(&mut self, leader: i32) -> Result<&mut KafkaClient, KafkaError> {
        match self.conns.entry(leader) {
            Entry::Occupied(c) => Ok(c.into_mut()),
            Entry::Vacant(v) => {
                let addr = self
                    .brokers
                    .get(&leader)
                    .ok_or_else(|| KafkaError::Broker {
                        what: format!("broker {leader}"),
                        name: "BROKER_NOT_AVAILABLE".into(),
                        code: 8,
                        detail: ": not in the Metadata response".into(),
                    })?;
                Ok(v.insert(KafkaClient::connect(addr, self.timeout)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_changes_are_the_retriable_codes() {
        for code in [5, 6, 74] {
            assert!(leader_moved(code), "{code}");
        }
        for code in [0, 1, 3, 7, 10] {
            assert!(!leader_moved(code), "{code}");
        }
    }
}
