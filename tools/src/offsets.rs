//! Offset look-ups and commits shared by `consume`, `group` and `self-test`: ListOffsets
//! (earliest, latest, by timestamp), FindCoordinator, OffsetFetch, OffsetCommit.
//!
//! Invariant: results are keyed by (topic, partition) in `BTreeMap`s, so every table built
//! from them comes out sorted; a partition whose answer carries an error code fails the
//! call naming that partition rather than being left out.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, GroupId, ListOffsetsRequest, OffsetCommitRequest,
    OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::kafka::{check_code, KafkaClient, KafkaError};

/// ListOffsets timestamp asking for the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets timestamp asking for the log end offset.
pub const LATEST_TIMESTAMP: i64 = -1;

/// A (topic, partition) pair.
pub type TopicPartition = (String, i32);

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// The address of each partition's leader (from Metadata); partitions without a known
/// leader are left out (the request then goes to the broker `client` talks to).
fn leader_addrs(
    client: &mut KafkaClient,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, String>, KafkaError> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::MetadataRequest;
    let mut topics: Vec<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
    topics.dedup();
    let req = MetadataRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
            .collect(),
    ));
    let resp = client.send(&req)?;
    let brokers = crate::topic::broker_addrs(&resp);
    let mut out = BTreeMap::new();
    for t in &resp.topics {
        let Some(name) = t.name.as_ref() else {
            continue;
        };
        for p in &t.partitions {
            if let Some(addr) = brokers.get(&p.leader_id.0) {
                out.insert((name.to_string(), p.partition_index), addr.clone());
            }
        }
    }
    Ok(out)
}

/// ListOffsets for each partition at `timestamp` (or the two special values), asked of each
/// partition's leader (a cluster serves offsets only there); `-1` in the result means no
/// record at or after that timestamp.
pub fn list_offsets(
    client: &mut KafkaClient,
    partitions: &[TopicPartition],
    timestamp: i64,
) -> Result<BTreeMap<TopicPartition, i64>, KafkaError> {
    let leaders = leader_addrs(client, partitions)?;
    let mut by_leader: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
    for tp in partitions {
        let addr = leaders
            .get(tp)
            .cloned()
            .unwrap_or_else(|| client.addr().to_string());
        by_leader.entry(addr).or_default().push(tp.clone());
    }
    let mut out = BTreeMap::new();
    for (addr, parts) in by_leader {
        let r = if addr == client.addr() {
            list_offsets_here(client, &parts, timestamp)?
        } else {
            let mut other = KafkaClient::connect(&addr, client.timeout())?;
            list_offsets_here(&mut other, &parts, timestamp)?
        };
        out.extend(r);
    }
    Ok(out)
}

/// ListOffsets sent to the broker `client` talks to.
fn list_offsets_here(
    client: &mut KafkaClient,
    partitions: &[TopicPartition],
    timestamp: i64,
) -> Result<BTreeMap<TopicPartition, i64>, KafkaError> {
    let mut by_topic: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for (t, p) in partitions {
        by_topic.entry(t.as_str()).or_default().push(
            ListOffsetsPartition::default()
                .with_partition_index(*p)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp),
        );
    }
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    ListOffsetsTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let resp = client.send(&req)?;
    let mut out = BTreeMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            check_code(
                p.error_code,
                &format!(
                    "list offsets of {} partition {}",
                    t.name.as_str(),
                    p.partition_index
                ),
                None,
            )?;
            out.insert((t.name.to_string(), p.partition_index), p.offset);
        }
    }
    Ok(out)
}

/// A connection to `group`'s coordinator: `None` when it is the broker `client` talks to.
pub fn coordinator(
    client: &mut KafkaClient,
    group: &str,
    timeout: Duration,
) -> Result<Option<KafkaClient>, KafkaError> {
    let req = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(group.to_string()))
        .with_key_type(0);
    let resp = client.send(&req)?;
    check_code(
        resp.error_code,
        &format!("find the coordinator of group {group}"),
        resp.error_message.as_ref(),
    )?;
    let addr = format!("{}:{}", resp.host.as_str(), resp.port);
    if addr == client.addr() {
        return Ok(None);
    }
    KafkaClient::connect(&addr, timeout).map(Some)
}

/// The group's committed offsets (only partitions with a commit), for `topics` or all.
pub fn committed(
    client: &mut KafkaClient,
    group: &str,
    topics: Option<&[TopicPartition]>,
) -> Result<BTreeMap<TopicPartition, i64>, KafkaError> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let topics = topics.map(|tps| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in tps {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopic::default()
                    .with_name(topic_name(t))
                    .with_partition_indexes(ps)
            })
            .collect()
    });
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(topics);
    let resp = client.send(&req)?;
    check_code(
        resp.error_code,
        &format!("fetch committed offsets of group {group}"),
        None,
    )?;
    let mut out = BTreeMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            check_code(
                p.error_code,
                &format!(
                    "committed offset of group {group} on {} partition {}",
                    t.name.as_str(),
                    p.partition_index
                ),
                None,
            )?;
            if p.committed_offset >= 0 {
                out.insert((t.name.to_string(), p.partition_index), p.committed_offset);
            }
        }
    }
    Ok(out)
}

/// Commits `offsets` for `group` outside any generation (generation -1, no member): Kafka
/// accepts this only while the group has no active members.
pub fn commit(
    client: &mut KafkaClient,
    group: &str,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<(), KafkaError> {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((t, p), o) in offsets {
        by_topic.entry(t.as_str()).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_retention_time_ms(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let resp = client.send(&req)?;
    for t in &resp.topics {
        for p in &t.partitions {
            check_code(
                p.error_code,
                &format!(
                    "commit offset of group {group} on {} partition {}",
                    t.name.as_str(),
                    p.partition_index
                ),
                None,
            )?;
        }
    }
    Ok(())
}
