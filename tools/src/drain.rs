//! `strandctl cluster drain`: moves every replica off one node (before `remove-node`, or
//! to empty a node that died), with Kafka's reassignment API (Metadata,
//! ListPartitionReassignments, AlterPartitionReassignments), and with `--wait-s` waits
//! until no partition names the node.
//!
//! Invariant of a plan (`plan`): each move keeps the partition's replication factor and the
//! other replicas where they are, puts the drained node's slot on a node the cluster lists
//! (a fenced node is not listed) that holds no replica of the partition, choosing the one
//! with the fewest replicas so far; a partition already moving, or with no node to take its
//! replica, is reported and left alone. Nothing is sent for a plan's stuck partitions, and a
//! drain that left any of them (or any refused move) ends with problems (exit 3).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::output::Table;
use crate::Outcome;

/// Partitions per AlterPartitionReassignments request.
const MOVES_PER_REQUEST_MAX: usize = 500;
/// How long the broker may take to accept a batch of moves, in milliseconds.
const REASSIGN_TIMEOUT_MS: i32 = 30_000;
/// Between two looks at the cluster while waiting.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// One partition and its replicas, as Metadata lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// A partition's new replica list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub topic: String,
    pub partition: i32,
    pub from: Vec<i32>,
    pub to: Vec<i32>,
}

/// What a drain does: the moves, and the partitions it cannot move now, with why.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub moves: Vec<Move>,
    pub stuck: Vec<(String, i32, String)>,
}

/// The moves that take `node` out of every partition in `placements` (see the module
/// invariant). `listed`: the nodes the cluster lists; `moving`: partitions with a move in
/// progress.
pub fn plan(
    node: i32,
    listed: &[i32],
    placements: &[Placement],
    moving: &BTreeSet<(String, i32)>,
) -> Plan {
    let mut load: BTreeMap<i32, usize> = listed
        .iter()
        .filter(|&&n| n != node)
        .map(|&n| (n, 0))
        .collect();
    for p in placements {
        for r in &p.replicas {
            if let Some(n) = load.get_mut(r) {
                *n += 1;
            }
        }
    }
    let mut out = Plan::default();
    for p in placements.iter().filter(|p| p.replicas.contains(&node)) {
        if moving.contains(&(p.topic.clone(), p.partition)) {
            out.stuck.push((
                p.topic.clone(),
                p.partition,
                "a move is in progress (`strandctl topic moves`); drain again once it is done"
                    .into(),
            ));
            continue;
        }
        // The least loaded listed node without a replica of this partition (lowest id on a
        // tie: the map iterates in id order and min_by_key keeps the first minimum).
        let target = load
            .iter()
            .filter(|(n, _)| !p.replicas.contains(n))
            .min_by_key(|(_, &count)| count)
            .map(|(&n, _)| n);
        let Some(target) = target else {
            out.stuck.push((
                p.topic.clone(),
                p.partition,
                format!(
                    "no other node can take the replica ({} replicas, {} other nodes listed)",
                    p.replicas.len(),
                    load.len()
                ),
            ));
            continue;
        };
        if let Some(n) = load.get_mut(&target) {
            *n += 1;
        }
        let to = p
            .replicas
            .iter()
            .map(|&r| if r == node { target } else { r })
            .collect();
        out.moves.push(Move {
            topic: p.topic.clone(),
            partition: p.partition,
            from: p.replicas.clone(),
            to,
        });
    }
    out
}

/// The cluster's listed nodes and every partition's replicas (internal topics included).
fn look(client: &mut KafkaClient) -> Result<(Vec<i32>, Vec<Placement>), KafkaError> {
    let md = crate::topic::metadata(client, None, false)?;
    let listed = md.brokers.iter().map(|b| b.node_id.0).collect();
    let mut placements = Vec::new();
    for t in &md.topics {
        let Some(name) = t.name.as_ref() else {
            continue;
        };
        check_code(t.error_code, &format!("topic {}", name.as_str()), None)?;
        for p in &t.partitions {
            placements.push(Placement {
                topic: name.as_str().to_string(),
                partition: p.partition_index,
                replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            });
        }
    }
    Ok((listed, placements))
}

/// Partitions with a move in progress.
fn moving(client: &mut KafkaClient) -> Result<BTreeSet<(String, i32)>, KafkaError> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(REASSIGN_TIMEOUT_MS)
        .with_topics(None);
    let resp = client.send(&req)?;
    check_code(resp.error_code, "list moves", resp.error_message.as_ref())?;
    Ok(resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect())
}

/// Sends `moves`; returns the refused ones with the broker's reason.
fn send_moves(
    client: &mut KafkaClient,
    moves: &[Move],
) -> Result<Vec<(String, i32, String)>, KafkaError> {
    let mut refused = Vec::new();
    for chunk in moves.chunks(MOVES_PER_REQUEST_MAX) {
        let mut by_topic: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
        for m in chunk {
            by_topic.entry(m.topic.as_str()).or_default().push(
                ReassignablePartition::default()
                    .with_partition_index(m.partition)
                    .with_replicas(Some(m.to.iter().map(|&n| BrokerId(n)).collect())),
            );
        }
        let topics = by_topic
            .into_iter()
            .map(|(name, partitions)| {
                ReassignableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_string())))
                    .with_partitions(partitions)
            })
            .collect();
        let req = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(REASSIGN_TIMEOUT_MS)
            .with_topics(topics);
        let resp = client.send(&req)?;
        check_code(resp.error_code, "drain", resp.error_message.as_ref())?;
        for t in &resp.responses {
            for p in &t.partitions {
                let what = format!("move {}/{}", t.name.0.as_str(), p.partition_index);
                if let Err(e) = check_code(p.error_code, &what, p.error_message.as_ref()) {
                    refused.push((t.name.0.to_string(), p.partition_index, e.to_string()));
                }
            }
        }
    }
    Ok(refused)
}

/// `cluster drain NODE [--wait-s S]`: the text to print and whether everything moved.
pub fn drain(
    client: &mut KafkaClient,
    node: i32,
    wait: Option<Duration>,
) -> Result<(String, Outcome), KafkaError> {
    let (listed, placements) = look(client)?;
    let plan = plan(node, &listed, &placements, &moving(client)?);
    if plan.moves.is_empty() && plan.stuck.is_empty() {
        return Ok((format!("node {node} holds no replicas\n"), Outcome::Ok));
    }
    let refused = send_moves(client, &plan.moves)?;
    let mut out = String::new();
    let mut table = Table::new(&["TOPIC", "PARTITION", "REPLICAS", "TARGET", "STATE"]);
    let ids = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for m in &plan.moves {
        let state = refused
            .iter()
            .find(|(t, p, _)| *t == m.topic && *p == m.partition)
            .map_or("moving".to_string(), |(_, _, why)| {
                format!("refused: {why}")
            });
        table.row(vec![
            m.topic.clone(),
            m.partition.to_string(),
            ids(&m.from),
            ids(&m.to),
            state,
        ]);
    }
    for (t, p, why) in &plan.stuck {
        table.row(vec![
            t.clone(),
            p.to_string(),
            "-".into(),
            "-".into(),
            format!("left: {why}"),
        ]);
    }
    out.push_str(&table.render());
    let mut outcome = if refused.is_empty() && plan.stuck.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Problems
    };
    let Some(wait) = wait else {
        out.push_str(&format!(
            "{} moves sent; `strandctl topic moves` shows them until they finish\n",
            plan.moves.len() - refused.len()
        ));
        return Ok((out, outcome));
    };
    let deadline = Instant::now() + wait;
    loop {
        let (_, now) = look(client)?;
        let left = now.iter().filter(|p| p.replicas.contains(&node)).count();
        if left == 0 && moving(client)?.is_empty() {
            out.push_str(&format!(
                "node {node} holds no replicas now (a joined node can leave: \
                 `strandctl cluster remove-node {node}`)\n"
            ));
            return Ok((out, outcome));
        }
        if Instant::now() >= deadline {
            out.push_str(&format!(
                "{left} partitions still name node {node} after {} s\n",
                wait.as_secs()
            ));
            outcome = Outcome::Problems;
            return Ok((out, outcome));
        }
        std::thread::sleep(WAIT_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(topic: &str, partition: i32, replicas: &[i32]) -> Placement {
        Placement {
            topic: topic.into(),
            partition,
            replicas: replicas.to_vec(),
        }
    }

    #[test]
    fn a_drained_slot_goes_to_the_least_loaded_node_without_the_partition() {
        // Node 4 drained. Loads: 1 -> 1, 2 -> 2, 3 -> 2, 5 -> 1.
        let placements = vec![
            at("a", 0, &[4, 1]),
            at("a", 1, &[4, 2]),
            at("b", 0, &[2, 3]),
            at("b", 1, &[3, 5]),
        ];
        let p = plan(4, &[1, 2, 3, 4, 5], &placements, &BTreeSet::new());
        assert!(p.stuck.is_empty(), "{p:?}");
        // a/0: 5 (load 1; 1 holds it) and 5 goes to 2; a/1: 1 (load 1), not 5 (now 2).
        assert_eq!(
            p.moves,
            vec![
                Move {
                    topic: "a".into(),
                    partition: 0,
                    from: vec![4, 1],
                    to: vec![5, 1],
                },
                Move {
                    topic: "a".into(),
                    partition: 1,
                    from: vec![4, 2],
                    to: vec![1, 2],
                },
            ]
        );
    }

    #[test]
    fn partitions_without_a_free_node_or_already_moving_are_left() {
        let placements = vec![
            at("a", 0, &[1, 2, 3]),
            at("a", 1, &[3, 1]),
            at("a", 2, &[3]),
        ];
        let moving = BTreeSet::from([("a".to_string(), 2)]);
        let p = plan(3, &[1, 2, 3], &placements, &moving);
        // a/0: nodes 1 and 2 both hold it; a/1 goes to 2; a/2 is moving.
        assert_eq!(p.moves.len(), 1);
        assert_eq!(p.moves[0].to, vec![2, 1]);
        let stuck: Vec<_> = p.stuck.iter().map(|(t, n, _)| (t.as_str(), *n)).collect();
        assert_eq!(stuck, vec![("a", 0), ("a", 2)]);
    }

    #[test]
    fn unlisted_nodes_never_receive_replicas_and_an_empty_node_has_no_plan() {
        // Node 5 is fenced (not listed): never a target even though it holds nothing.
        let placements = vec![at("a", 0, &[4, 1])];
        let p = plan(4, &[1, 2, 4], &placements, &BTreeSet::new());
        assert_eq!(p.moves[0].to, vec![2, 1]);
        assert_eq!(
            plan(9, &[1, 2], &placements, &BTreeSet::new()),
            Plan::default()
        );
    }
}
