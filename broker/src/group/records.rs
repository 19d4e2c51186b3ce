//! Records in `__consumer_offsets`: committed offsets and group metadata, as JSON keys and
//! values (a null value is a tombstone), and their replay into groups.
//!
//! Invariant: replaying the records of a partition in order yields the committed offsets
//! and the last persisted metadata of every group placed on it.

use std::collections::HashMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state::{Committed, Group, GroupState, Member};

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

/// Applies one record to `groups` (replay). Malformed records are skipped with a warning:
/// they can only come from a bug, and skipping one loses at most that commit.
pub fn apply(groups: &mut HashMap<String, Group>, key: &[u8], value: Option<&[u8]>) {
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
                let c = Committed {
                    offset: v.offset,
                    leader_epoch: v.leader_epoch,
                    metadata: v.metadata,
                };
                g.offsets.insert((topic, partition), c);
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
    }
}

fn restore(g: &mut Group, v: GroupValue) {
    let now = crate::clock::now();
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
