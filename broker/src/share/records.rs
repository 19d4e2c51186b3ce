//! The `__share_group_state` records: one per share partition, keyed by (group, topic,
//! partition), whose value is the share partition's whole `ShareState` (JSON); the topic
//! is compacted, so the newest value of each key is what a restart reads.
//!
//! Invariant: a key decodes to exactly the share partition it was made for; an unreadable
//! record is skipped with a warning (it can only come from a bug).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::partition::ShareState;

/// A share partition: (share group, topic, partition).
pub type ShareKey = (String, String, i32);

/// What of a share group to forget (its share partitions and their persisted states): all
/// of it (a deleted group), or some partitions (offsets deleted or reset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forget {
    pub group: String,
    /// `None`: every partition of the group.
    pub only: Option<BTreeMap<String, BTreeSet<i32>>>,
}

impl Forget {
    /// All of `group`.
    pub fn group(group: &str) -> Self {
        Forget {
            group: group.to_string(),
            only: None,
        }
    }

    /// Whether `k` is forgotten.
    pub fn covers(&self, k: &ShareKey) -> bool {
        k.0 == self.group
            && self
                .only
                .as_ref()
                .is_none_or(|o| o.get(&k.1).is_some_and(|ps| ps.contains(&k.2)))
    }
}

#[derive(Serialize, Deserialize)]
struct Key {
    group: String,
    topic: String,
    partition: i32,
}

/// The record key of `k`.
pub fn key_bytes(k: &ShareKey) -> Vec<u8> {
    serde_json::to_vec(&Key {
        group: k.0.clone(),
        topic: k.1.clone(),
        partition: k.2,
    })
    .unwrap_or_default()
}

/// The record value of `state`.
pub fn value_bytes(state: &ShareState) -> Vec<u8> {
    serde_json::to_vec(state).unwrap_or_default()
}

fn decode_key(key: &[u8]) -> Option<ShareKey> {
    let k: Key = serde_json::from_slice(key).ok()?;
    Some((k.group, k.topic, k.partition))
}

/// The scope of a key for the partition's compacted checkpoint: each key its own.
pub fn scope_of(key: &[u8]) -> Option<(String, bool)> {
    decode_key(key).map(|(g, t, p)| (format!("{g}\u{0}{t}\u{0}{p}"), true))
}

/// Applies one record to `states` (a tombstone removes the share partition).
pub fn apply(states: &mut HashMap<ShareKey, ShareState>, key: &[u8], value: Option<&[u8]>) {
    let Some(k) = decode_key(key) else {
        tracing::warn!("skipping an unreadable __share_group_state key");
        return;
    };
    match value.map(serde_json::from_slice::<ShareState>) {
        Some(Ok(state)) => {
            states.insert(k, state);
        }
        Some(Err(_)) => tracing::warn!(group = %k.0, "skipping an unreadable share state"),
        None => {
            states.remove(&k);
        }
    }
}

/// The `__share_group_state` partition of `k` among `partitions` (Kafka's
/// `SharePartitionKey`: "group:topicId:partition"; by topic name here).
pub fn partition_for(k: &ShareKey, partitions: usize) -> i32 {
    crate::group::partition_for(&format!("{}:{}:{}", k.0, k.1, k.2), partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_tombstone_removes() {
        let k: ShareKey = ("g".into(), "t".into(), 3);
        let state = ShareState {
            start: 5,
            end: 9,
            available: vec![(6, 7, 2)],
            leader_epoch: 4,
        };
        let mut states = HashMap::new();
        apply(&mut states, &key_bytes(&k), Some(&value_bytes(&state)));
        assert_eq!(states.get(&k), Some(&state));
        assert!(scope_of(&key_bytes(&k)).is_some());
        apply(&mut states, b"not json", Some(b"{}"));
        apply(&mut states, &key_bytes(&k), None);
        assert!(states.is_empty());
        assert!((0..50).contains(&partition_for(&k, 50)));
    }

    #[test]
    fn a_forget_covers_its_group_or_only_the_partitions_it_names() {
        let k = |g: &str, t: &str, p| (g.to_string(), t.to_string(), p);
        let all = Forget::group("g");
        assert!(all.covers(&k("g", "t", 0)) && all.covers(&k("g", "u", 9)));
        assert!(!all.covers(&k("h", "t", 0)));
        let some = Forget {
            group: "g".into(),
            only: Some(BTreeMap::from([("t".into(), BTreeSet::from([1]))])),
        };
        assert!(some.covers(&k("g", "t", 1)));
        assert!(!some.covers(&k("g", "t", 0)) && !some.covers(&k("g", "u", 1)));
        assert!(!some.covers(&k("h", "t", 1)));
    }
}
