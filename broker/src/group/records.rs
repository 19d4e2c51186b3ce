//! Records in `__consumer_offsets`: committed offsets and group metadata, as JSON keys and
//! values (a null value is a tombstone), and their replay into groups.
//!
//! Invariant: replaying the records of a partition in order yields the committed offsets
//! and the last persisted metadata of every group placed on it.

use std::collections::HashMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state::{Committed, Group, GroupState, Member};
use crate::partition::compacted::Compacted;

/// A record key.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "k")]
pub enum Key {
    /// A committed offset.
    Offset {
        /// Group.
        group: String,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
    },
    /// Group metadata.
    Group {
        /// Group.
        group: String,
    },
    /// The state of a consumer-protocol group (KIP-848), a `consumer::ConsumerGroup`
    /// snapshot; a tombstone makes the group classic again. Its group key's tombstone
    /// deletes it with the group.
    ConsumerGroup {
        /// Group.
        group: String,
    },
    /// The membership of a share group (KIP-932), a `share::group::ShareGroup` snapshot;
    /// a tombstone deletes the group. (Its delivery state is in `__share_group_state`.)
    ShareGroup {
        /// Group.
        group: String,
    },
}

/// Share groups' snapshots by group id, as replay finds them beside the other groups: the
/// group layer keeps them as the bytes written (the share layer above decodes them), and
/// reads only their `version`.
pub type ShareGroups = HashMap<String, Vec<u8>>;

/// The one field of a share-group snapshot replay reads: newer versions win.
#[derive(Deserialize)]
struct Versioned {
    #[serde(default)]
    version: u64,
}

/// A committed-offset value.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OffsetValue {
    /// Offset.
    pub offset: i64,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Metadata.
    pub metadata: String,
    /// When it was committed (ms since the epoch; absent in records of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_timestamp_ms: Option<i64>,
}

/// A member as persisted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberValue {
    /// Member id.
    pub id: String,
    /// Static id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Protocols (name, metadata).
    pub protocols: Vec<(String, Vec<u8>)>,
    /// Assignment.
    pub assignment: Vec<u8>,
}

/// Group metadata value.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupValue {
    /// Generation.
    pub generation: i32,
    /// Protocol type.
    pub protocol_type: Option<String>,
    /// Chosen protocol.
    pub protocol: Option<String>,
    /// Leader.
    pub leader: Option<String>,
    /// Members.
    pub members: Vec<MemberValue>,
    /// Since when an Empty group has been empty (ms since the epoch; absent when it has
    /// members, and in records of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_timestamp_ms: Option<i64>,
}

/// Encodes a key.
pub fn key_bytes(k: &Key) -> Vec<u8> {
    serde_json::to_vec(k).unwrap_or_default()
}

/// Encodes a value.
pub fn value_bytes<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// The persisted form of a group's metadata.
pub fn group_value(g: &Group) -> GroupValue {
    GroupValue {
        generation: g.generation,
        protocol_type: g.protocol_type.clone(),
        protocol: g.protocol.clone(),
        leader: g.leader.clone(),
        state_timestamp_ms: g.empty_since_ms.filter(|_| g.members.is_empty()),
        members: g
            .members
            .values()
            .map(|m| MemberValue {
                id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: m
                    .protocols
                    .iter()
                    .map(|(n, b)| (n.clone(), b.to_vec()))
                    .collect(),
                assignment: m.assignment.to_vec(),
            })
            .collect(),
    }
}

/// Applies one record to `groups`, or to `shares` for a share group's (replay). Malformed
/// records are skipped with a warning: they can only come from a bug, and skipping one
/// loses at most that commit.
pub fn apply(
    groups: &mut HashMap<String, Group>,
    shares: &mut ShareGroups,
    key: &[u8],
    value: Option<&[u8]>,
) {
    let Ok(k) = serde_json::from_slice::<Key>(key) else {
        tracing::warn!("skipping unreadable __consumer_offsets key");
        return;
    };
    match k {
        Key::Offset {
            group,
            topic,
            partition,
        } => match value.map(serde_json::from_slice::<OffsetValue>) {
            Some(Ok(v)) => {
                let g = groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(&group));
                g.offsets.insert((topic, partition), committed_of(v));
            }
            Some(Err(_)) => tracing::warn!(%group, "skipping unreadable offset record"),
            None => {
                if let Some(g) = groups.get_mut(&group) {
                    g.offsets.remove(&(topic, partition));
                }
            }
        },
        Key::Group { group } => match value.map(serde_json::from_slice::<GroupValue>) {
            Some(Ok(v)) => {
                let g = groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(&group));
                restore(g, v);
            }
            Some(Err(_)) => tracing::warn!(%group, "skipping unreadable group record"),
            None => {
                groups.remove(&group);
            }
        },
        Key::ConsumerGroup { group } => {
            match value.map(serde_json::from_slice::<super::consumer::ConsumerGroup>) {
                Some(Ok(mut c)) => {
                    let g = groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(&group));
                    if g.consumer
                        .as_ref()
                        .is_none_or(|old| old.version < c.version)
                    {
                        c.loaded(crate::common::clock::now());
                        g.protocol_type = Some("consumer".into());
                        g.consumer = Some(c);
                        // Upgraded: its classic members are consumer-group members now.
                        g.members.clear();
                        g.pending.clear();
                        g.leader = None;
                        g.state = GroupState::Empty;
                    }
                }
                Some(Err(_)) => tracing::warn!(%group, "skipping unreadable consumer group record"),
                None => {
                    if let Some(g) = groups.get_mut(&group) {
                        g.consumer = None;
                    }
                }
            }
        }
        Key::ShareGroup { group } => apply_share(shares, group, value),
    }
}

/// A share group's snapshot (`None`: its tombstone) replayed into `shares`; the newest
/// version wins.
fn apply_share(shares: &mut ShareGroups, group: String, value: Option<&[u8]>) {
    let version = |bytes: &[u8]| serde_json::from_slice::<Versioned>(bytes).map(|v| v.version);
    match value {
        Some(bytes) => match version(bytes) {
            Ok(new) => {
                let old = shares.get(&group).and_then(|b| version(b).ok());
                if old.is_none_or(|old| old < new) {
                    shares.insert(group, bytes.to_vec());
                }
            }
            Err(_) => tracing::warn!(%group, "skipping unreadable share group record"),
        },
        None => {
            shares.remove(&group);
        }
    }
}

/// The key of `group`'s share-group snapshot.
pub fn share_group_key(group: &str) -> Vec<u8> {
    key_bytes(&Key::ShareGroup {
        group: group.to_string(),
    })
}

/// The group, partition and offset an offset-commit record sets; `None` for any other
/// record (group metadata, a tombstone, an unreadable one).
pub fn offset_record(
    key: &[u8],
    value: Option<&[u8]>,
) -> Option<(String, (String, i32), Committed)> {
    let Key::Offset {
        group,
        topic,
        partition,
    } = serde_json::from_slice::<Key>(key).ok()?
    else {
        return None;
    };
    let v = serde_json::from_slice::<OffsetValue>(value?).ok()?;
    Some((group, (topic, partition), committed_of(v)))
}

/// The committed offset an offset record holds. An older record's offset (no commit time)
/// counts as committed when loaded: an upgrade never expires everything at once.
fn committed_of(v: OffsetValue) -> Committed {
    Committed {
        offset: v.offset,
        leader_epoch: v.leader_epoch,
        metadata: v.metadata,
        commit_timestamp_ms: v
            .commit_timestamp_ms
            .unwrap_or_else(crate::common::clock::wall_ms),
    }
}

/// The scope of an `__consumer_offsets` key for the partition's compacted checkpoint
/// (`partition::compacted`): its group, and whether it is the group's own key (whose
/// tombstone deletes the group, offsets included, as `apply` does). `None` for an
/// unreadable key (replay skips it).
pub fn scope_of(key: &[u8]) -> Option<(String, bool)> {
    match serde_json::from_slice::<Key>(key).ok()? {
        Key::Offset { group, .. } => Some((group, false)),
        Key::Group { group } => Some((group, true)),
        Key::ConsumerGroup { group } | Key::ShareGroup { group } => Some((group, false)),
    }
}

/// Stages an offset-commit record at `log_offset` of producer `producer_id`'s open
/// transaction in its group (other records of a transaction are not kept).
pub fn stage(
    groups: &mut HashMap<String, Group>,
    producer_id: i64,
    log_offset: i64,
    key: &[u8],
    value: Option<&[u8]>,
) {
    if let Some((group, key, c)) = offset_record(key, value) {
        groups
            .entry(group.clone())
            .or_insert_with(|| Group::new(&group))
            .stage_txn_offset(producer_id, key, log_offset, c);
    }
}

/// Applies every record of an offsets partition's compacted checkpoint to `groups`.
pub fn replay_compacted(
    compacted: &Compacted,
    groups: &mut HashMap<String, Group>,
    shares: &mut ShareGroups,
) {
    for (k, v) in compacted.records() {
        apply(groups, shares, k, Some(v));
    }
}

fn restore(g: &mut Group, v: GroupValue) {
    let now = crate::common::clock::now();
    g.empty_since_ms = if v.members.is_empty() {
        Some(
            v.state_timestamp_ms
                .unwrap_or_else(crate::common::clock::wall_ms),
        )
    } else {
        None
    };
    g.generation = v.generation;
    g.protocol_type = v.protocol_type;
    g.protocol = v.protocol;
    g.leader = v.leader;
    g.members = v
        .members
        .into_iter()
        .map(|m| {
            let member = Member {
                id: m.id.clone(),
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: m
                    .protocols
                    .into_iter()
                    .map(|(n, b)| (n, Bytes::from(b)))
                    .collect(),
                assignment: Bytes::from(m.assignment),
                join_waiter: None,
                sync_waiter: None,
                last_seen: now,
            };
            (m.id, member)
        })
        .collect();
    g.state = if g.members.is_empty() {
        GroupState::Empty
    } else {
        GroupState::Stable
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn offset(group: &str, partition: i32, offset: i64) -> (Vec<u8>, Option<Vec<u8>>) {
        let k = Key::Offset {
            group: group.into(),
            topic: "t".into(),
            partition,
        };
        let v = OffsetValue {
            offset,
            leader_epoch: 0,
            metadata: String::new(),
            commit_timestamp_ms: None,
        };
        (key_bytes(&k), Some(value_bytes(&v)))
    }

    fn group(group: &str, generation: i32, deleted: bool) -> (Vec<u8>, Option<Vec<u8>>) {
        let k = key_bytes(&Key::Group {
            group: group.into(),
        });
        let v = GroupValue {
            generation,
            protocol_type: Some("consumer".into()),
            protocol: None,
            leader: None,
            members: Vec::new(),
            state_timestamp_ms: None,
        };
        (k, (!deleted).then(|| value_bytes(&v)))
    }

    /// Offsets and generation of every group, comparable.
    fn summary(groups: &HashMap<String, Group>) -> BTreeMap<String, (i32, Vec<(i32, i64)>)> {
        groups
            .iter()
            .map(|(id, g)| {
                let mut offsets: Vec<_> =
                    g.offsets.iter().map(|((_, p), c)| (*p, c.offset)).collect();
                offsets.sort();
                (id.clone(), (g.generation, offsets))
            })
            .collect()
    }

    #[test]
    fn compacted_records_replay_to_the_same_groups() {
        let log = [
            group("a", 1, false),
            offset("a", 0, 5),
            offset("a", 1, 7),
            offset("b", 0, 3),
            offset("a", 0, 9),
            (offset("a", 1, 0).0, None),
            group("b", 2, false),
            group("b", 2, true),
            offset("b", 1, 11),
            group("c", 4, false),
        ];
        let mut replayed = HashMap::new();
        let mut compacted = Compacted::new(scope_of);
        for (k, v) in &log {
            apply(&mut replayed, &mut ShareGroups::new(), k, v.as_deref());
            compacted.apply(k, v.as_deref());
        }
        let mut from_compacted = HashMap::new();
        replay_compacted(&compacted, &mut from_compacted, &mut ShareGroups::new());
        assert_eq!(summary(&from_compacted), summary(&replayed));
        assert_eq!(
            summary(&replayed)["b"],
            (0, vec![(1, 11)]),
            "recreated after delete"
        );
        assert_eq!(
            compacted.count(),
            4,
            "a's group and offset 0, b's offset 1, c's group"
        );

        let mut bytes = Vec::new();
        compacted.encode(&mut bytes);
        bytes.push(0xAA);
        let (back, rest) = Compacted::decode(&bytes, scope_of).expect("decodes");
        assert_eq!((back, rest), (compacted, &[0xAA][..]));
        for cut in 0..bytes.len() - 1 {
            assert!(
                Compacted::decode(&bytes[..cut], scope_of).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn consumer_group_snapshots_replay_newest_first_and_a_tombstone_ends_them() {
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fuzz/corpus/group_records/consumer-group"
        ))
        .expect("the fuzz seed");
        let at = seed.iter().position(|&b| b == 0).expect("key NUL value");
        let (key, value) = (&seed[..at], &seed[at + 1..]);
        let mut groups = HashMap::new();
        let shares = &mut ShareGroups::new();
        apply(&mut groups, shares, key, Some(value));
        let c = groups["g"].consumer.clone().expect("a consumer group");
        assert_eq!((c.version, c.group_epoch, c.members.len()), (3, 2, 2));
        assert_eq!(groups["g"].protocol_type.as_deref(), Some("consumer"));
        // An older snapshot reaching the log later does not win.
        let mut older = c.clone();
        older.version = 2;
        older.group_epoch = 1;
        apply(
            &mut groups,
            shares,
            key,
            Some(&serde_json::to_vec(&older).expect("json")),
        );
        assert_eq!(
            groups["g"].consumer.as_ref().map(|c| c.group_epoch),
            Some(2)
        );
        apply(&mut groups, shares, key, None);
        assert!(groups["g"].consumer.is_none());
        assert!(shares.is_empty());
    }

    #[test]
    fn share_group_snapshots_replay_newest_first_apart_from_other_groups() {
        let snapshot = |version: u64, epoch: i32| {
            serde_json::to_vec(&serde_json::json!({"version": version, "epoch": epoch}))
                .expect("json")
        };
        let (first, second) = (snapshot(1, 1), snapshot(2, 3));
        let key = share_group_key("s");
        let mut groups = HashMap::new();
        let mut shares = ShareGroups::new();
        let mut compacted = Compacted::new(scope_of);
        for v in [&second, &first] {
            apply(&mut groups, &mut shares, &key, Some(v));
            compacted.apply(&key, Some(v));
        }
        assert!(groups.is_empty(), "a share group is not a classic group");
        assert_eq!(
            shares["s"], second,
            "an older snapshot arriving later does not win"
        );
        apply(&mut groups, &mut shares, &key, Some(b"not json"));
        assert_eq!(shares["s"], second, "an unreadable one is skipped");
        apply(&mut groups, &mut shares, &key, None);
        assert!(shares.is_empty(), "a tombstone deletes it");
        compacted.apply(&key, None);
        assert_eq!(compacted.count(), 0);
    }
}
