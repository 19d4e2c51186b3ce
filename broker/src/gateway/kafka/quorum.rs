//! DescribeQuorum, AddRaftVoter and RemoveRaftVoter (Kafka's KIP-595/KIP-853 APIs, which a
//! Kafka broker forwards to its controller): show and change the controller group's voters.
//! DescribeQuorum answers as the node asked sees the group (topic `__cluster_metadata`,
//! partition 0): offsets are Raft indexes of the controller log; each member's log end is
//! known on the controller's leader only (-1 elsewhere). Every node follows the
//! controller group; a voter is in the quorum of every metadata change. Replacing a seed
//! whose machine or disk is gone: join a new node, add it, remove the old one, then drain
//! and remove the old node (UnregisterBroker).
//!
//! Invariant: a change is one `Command::SetControllerVoters` committed to the controller
//! log (checked there: 1 to `CONTROLLER_VOTERS_MAX` registered nodes); the answer comes
//! once the controller group's own voters equal it (the controller's leader moves the
//! group one configuration change at a time), or REQUEST_TIMED_OUT after `timeout_ms`
//! (the change stays committed and goes on). Directory ids and listeners in the request
//! are not used: a node id names one data directory here.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::describe_quorum_response::{PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, BrokerId, DescribeQuorumRequest,
    DescribeQuorumResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::Command;
use crate::cluster::ClusterHost;
use crate::common::errors::code;
use crate::common::errors::KafkaError;
use crate::security::acl::op;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// RemoveRaftVoter carries no timeout: how long it waits for the group to follow.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait a request may ask for.
const TIMEOUT_MAX: Duration = Duration::from_secs(300);
/// Between two looks at the controller group's voters.
const POLL: Duration = Duration::from_millis(50);

/// The topic name Kafka gives the metadata log in DescribeQuorum.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// DescribeQuorum.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: DescribeQuorumRequest = ctx.decode(body)?;
    if !ctx.allowed_on_cluster(shard, op::DESCRIBE) {
        return ctx.respond(
            &DescribeQuorumResponse::default().with_error_code(code::CLUSTER_AUTHORIZATION_FAILED),
        );
    }
    // Only a cluster has a controller group (no cross-shard call without one).
    let view = match shard.clustered() {
        true => match shard.call(0, Op::ControllerView).await {
            Reply::View(v) => v,
            _ => None,
        },
        false => None,
    };
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let known = t.topic_name.0.as_str() == METADATA_TOPIC && p.partition_index == 0;
                    match view.as_ref().filter(|_| known) {
                        Some(v) => quorum_partition(v),
                        None => PartitionData::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(KafkaError::UnknownTopicOrPartition.code())
                            .with_leader_id(BrokerId(-1))
                            .with_leader_epoch(-1)
                            .with_high_watermark(-1),
                    }
                })
                .collect();
            TopicData::default()
                .with_topic_name(t.topic_name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ctx.respond(&DescribeQuorumResponse::default().with_topics(topics))
}

/// The controller group as DescribeQuorum's partition 0 of `__cluster_metadata`.
fn quorum_partition(v: &strand_raft::GroupView) -> PartitionData {
    let state = |id: u64| {
        let end = v
            .matched
            .iter()
            .find(|(n, _)| *n == id)
            .map_or(-1, |&(_, m)| i64::try_from(m).unwrap_or(i64::MAX));
        ReplicaState::default()
            .with_replica_id(BrokerId(i32::try_from(id).unwrap_or(-1)))
            .with_log_end_offset(end)
            .with_last_fetch_timestamp(-1)
            .with_last_caught_up_timestamp(-1)
    };
    PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(
            v.leader.map_or(-1, |l| i32::try_from(l).unwrap_or(-1)),
        ))
        .with_leader_epoch(i32::try_from(v.term).unwrap_or(i32::MAX))
        .with_high_watermark(i64::try_from(v.commit).unwrap_or(i64::MAX))
        .with_current_voters(v.voters.iter().map(|&n| state(n)).collect())
        .with_observers(v.learners.iter().map(|&n| state(n)).collect())
}

/// AddRaftVoter.
pub async fn add(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: AddRaftVoterRequest = ctx.decode(body)?;
    let timeout =
        Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).min(TIMEOUT_MAX);
    let (code, message) = if ctx.allowed_on_cluster(shard, op::ALTER) {
        change(shard, req.cluster_id.as_ref(), req.voter_id, true, timeout).await
    } else {
        (code::CLUSTER_AUTHORIZATION_FAILED, None)
    };
    ctx.respond(
        &AddRaftVoterResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(StrBytes::from_string)),
    )
}

/// RemoveRaftVoter.
pub async fn remove(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: RemoveRaftVoterRequest = ctx.decode(body)?;
    let (code, message) = if ctx.allowed_on_cluster(shard, op::ALTER) {
        change(
            shard,
            req.cluster_id.as_ref(),
            req.voter_id,
            false,
            REMOVE_TIMEOUT,
        )
        .await
    } else {
        (code::CLUSTER_AUTHORIZATION_FAILED, None)
    };
    ctx.respond(
        &RemoveRaftVoterResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(StrBytes::from_string)),
    )
}

/// The voters after adding (`add`) or removing `id`, or the error code and message.
fn target(current: &[i32], id: i32, add: bool) -> Result<Vec<i32>, (i16, String)> {
    let mut next = current.to_vec();
    if add {
        if current.contains(&id) {
            return Err((
                code::DUPLICATE_VOTER,
                format!("node {id} is a controller voter already"),
            ));
        }
        next.push(id);
    } else {
        if !current.contains(&id) {
            return Err((
                code::VOTER_NOT_FOUND,
                format!("node {id} is not a controller voter"),
            ));
        }
        next.retain(|&n| n != id);
        if next.is_empty() {
            return Err((
                code::INVALID_REQUEST,
                "the controller needs a voter".to_string(),
            ));
        }
    }
    next.sort_unstable();
    Ok(next)
}

async fn change(
    shard: &Rc<Shard>,
    cluster_id: Option<&StrBytes>,
    id: i32,
    add: bool,
    timeout: Duration,
) -> (i16, Option<String>) {
    if !shard.clustered() {
        return (
            code::INVALID_REQUEST,
            Some("a single-node broker has no controller quorum".into()),
        );
    }
    let ours = shard.committed_metadata().cluster_id.clone();
    // Null or empty: not checked (the request's default).
    if let Some(theirs) = cluster_id.filter(|c| !c.is_empty() && c.as_str() != ours) {
        return (
            code::INCONSISTENT_CLUSTER_ID,
            Some(format!(
                "cluster id {} is not this cluster's ({ours})",
                theirs.as_str()
            )),
        );
    }
    let next = match target(&crate::cluster::controller_voters(&**shard), id, add) {
        Ok(next) => next,
        Err((code, why)) => return (code, Some(why)),
    };
    let cmd = Command::SetControllerVoters {
        voters: next.clone(),
    };
    match super::topics::commit(shard, vec![cmd]).await.pop() {
        Some(Ok(())) => {}
        Some(Err(e)) => return (e.kafka_code(), Some(e.to_string())),
        None => return (-1, Some("no outcome".into())),
    }
    let wanted: Vec<u64> = next.iter().map(|&n| n as u64).collect();
    let deadline = crate::common::clock::now() + timeout;
    loop {
        if let Reply::View(Some(mut view)) = shard.call(0, Op::ControllerView).await {
            view.voters.sort_unstable();
            if view.voters == wanted {
                return (0, None);
            }
        }
        if crate::common::clock::now() >= deadline || shard.stopping() {
            return (
                KafkaError::RequestTimedOut.code(),
                Some(format!(
                    "the controller's voters are moving to {next:?} (committed); not there yet"
                )),
            );
        }
        crate::runtime::task::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voter_changes_are_checked_against_the_current_voters() {
        assert_eq!(target(&[1, 2, 3], 4, true), Ok(vec![1, 2, 3, 4]));
        assert_eq!(target(&[3, 1, 2], 3, false), Ok(vec![1, 2]));
        assert_eq!(
            target(&[1, 2, 3], 2, true).map_err(|e| e.0),
            Err(code::DUPLICATE_VOTER)
        );
        assert_eq!(
            target(&[1, 2, 3], 4, false).map_err(|e| e.0),
            Err(code::VOTER_NOT_FOUND)
        );
        assert_eq!(
            target(&[1], 1, false).map_err(|e| e.0),
            Err(code::INVALID_REQUEST)
        );
    }
}
