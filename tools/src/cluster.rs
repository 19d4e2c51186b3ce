//! `strandctl cluster`: `info` (Kafka Metadata and DescribeCluster), `health` (the
//! admin API's `/v1/health`, `/v1/health/ready`, `/v1/status`) and `remove-node`
//! (UnregisterBroker); `drain` is in `drain.rs`.
//!
//! Invariant: `health` reports healthy only when the broker answered ready; any other
//! answer (not ready, unreachable liveness endpoint) is a problem (exit 3), while a
//! connection failure is an error (exit 1).

use std::time::Duration;

use kafka_protocol::messages::describe_quorum_request::{
    PartitionData as QuorumPartition, TopicData as QuorumTopic,
};
use kafka_protocol::messages::describe_quorum_response::PartitionData as QuorumState;
use kafka_protocol::messages::{
    AddRaftVoterRequest, BrokerId, DescribeClusterRequest, DescribeQuorumRequest,
    RemoveRaftVoterRequest, TopicName, UnregisterBrokerRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::admin_http;
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::output::{or_dash, Table};
use crate::Outcome;

/// `cluster info`.
pub fn info(client: &mut KafkaClient) -> Result<String, KafkaError> {
    let md = crate::topic::metadata(client, Some(&[]), false)?;
    // Metadata names the node answering (it forwards controller requests, as KRaft brokers
    // name a live broker); the quorum's leader is the controller itself.
    let controller = match client.version_of::<DescribeQuorumRequest>() {
        Ok(_) => describe_quorum(client)
            .ok()
            .map(|p| p.leader_id.0)
            .filter(|&l| l >= 0)
            .unwrap_or(md.controller_id.0),
        Err(_) => md.controller_id.0,
    };
    let mut out = format!(
        "CLUSTER-ID  {}\nCONTROLLER  {}\n",
        or_dash(md.cluster_id.as_ref().map(|c| c.as_str())),
        controller
    );
    // DescribeCluster adds fencing state; older brokers lack it, which is not an error.
    let fenced = match client.version_of::<DescribeClusterRequest>() {
        Ok(_) => {
            let dc = client.send(&DescribeClusterRequest::default())?;
            check_code(dc.error_code, "describe cluster", dc.error_message.as_ref())?;
            dc.brokers
                .iter()
                .map(|b| (b.broker_id.0, b.is_fenced))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    let mut brokers = md.brokers.clone();
    brokers.sort_by_key(|b| b.node_id.0);
    let mut table = Table::new(&["BROKER", "HOST", "PORT", "RACK", "FENCED"]);
    for b in &brokers {
        let f = fenced
            .iter()
            .find(|(id, _)| *id == b.node_id.0)
            .map(|(_, f)| *f);
        table.row(vec![
            b.node_id.0.to_string(),
            b.host.to_string(),
            b.port.to_string(),
            or_dash(b.rack.as_ref().map(|r| r.as_str())),
            or_dash(f),
        ]);
    }
    out.push('\n');
    out.push_str(&table.render());
    Ok(out)
}

/// `cluster remove-node`.
pub fn remove_node(client: &mut KafkaClient, id: i32) -> Result<String, KafkaError> {
    let resp = client.send(&UnregisterBrokerRequest::default().with_broker_id(BrokerId(id)))?;
    check_code(
        resp.error_code,
        &format!("remove node {id}"),
        resp.error_message.as_ref(),
    )?;
    Ok(format!(
        "node {id} removed from the cluster; stop its process\n"
    ))
}

/// DescribeQuorum of the metadata log: its one partition, checked.
fn describe_quorum(client: &mut KafkaClient) -> Result<QuorumState, KafkaError> {
    let req = DescribeQuorumRequest::default().with_topics(vec![QuorumTopic::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![QuorumPartition::default().with_partition_index(0)])]);
    let resp = client.send(&req)?;
    check_code(
        resp.error_code,
        "describe quorum",
        resp.error_message.as_ref(),
    )?;
    let first = resp
        .topics
        .into_iter()
        .next()
        .and_then(|t| t.partitions.into_iter().next());
    let Some(p) = first else {
        return Err(KafkaError::Broker {
            what: "describe quorum".into(),
            name: "UNKNOWN_TOPIC_OR_PARTITION".into(),
            code: 3,
            detail: ": no partition in the answer".into(),
        });
    };
    check_code(p.error_code, "describe quorum", p.error_message.as_ref())?;
    Ok(p)
}

/// `cluster quorum` (DescribeQuorum of the metadata log).
pub fn quorum(client: &mut KafkaClient) -> Result<String, KafkaError> {
    let p = describe_quorum(client)?;
    let mut out = format!(
        "LEADER  {}\nEPOCH   {}\nCOMMIT  {}\n",
        p.leader_id.0, p.leader_epoch, p.high_watermark
    );
    let mut table = Table::new(&["NODE", "ROLE", "LOG-END", "LAG"]);
    let rows = p
        .current_voters
        .iter()
        .map(|r| (r, "voter"))
        .chain(p.observers.iter().map(|r| (r, "observer")));
    for (r, role) in rows {
        let (end, lag) = if r.log_end_offset < 0 {
            ("-".to_string(), "-".to_string())
        } else {
            let lag = (p.high_watermark - r.log_end_offset).max(0);
            (r.log_end_offset.to_string(), lag.to_string())
        };
        table.row(vec![r.replica_id.0.to_string(), role.to_string(), end, lag]);
    }
    out.push_str(&table.render());
    Ok(out)
}

/// How long the broker may take to move the controller group to new voters.
const VOTER_CHANGE_TIMEOUT_MS: i32 = 60_000;

/// `cluster add-controller` / `remove-controller` (AddRaftVoter / RemoveRaftVoter).
pub fn change_controller(
    client: &mut KafkaClient,
    id: i32,
    add: bool,
) -> Result<String, KafkaError> {
    let (code, message, what) = if add {
        let req = AddRaftVoterRequest::default()
            .with_voter_id(id)
            .with_timeout_ms(VOTER_CHANGE_TIMEOUT_MS);
        let resp = client.send(&req)?;
        (resp.error_code, resp.error_message, "add controller voter")
    } else {
        let resp = client.send(&RemoveRaftVoterRequest::default().with_voter_id(id))?;
        (
            resp.error_code,
            resp.error_message,
            "remove controller voter",
        )
    };
    check_code(code, &format!("{what} {id}"), message.as_ref())?;
    Ok(if add {
        format!("node {id} is a controller voter\n")
    } else {
        format!("node {id} is no longer a controller voter (it follows the controller)\n")
    })
}

/// `cluster health`: the text and whether the broker is ready.
pub fn health(admin: &str, timeout: Duration) -> Result<(String, Outcome), admin_http::HttpError> {
    let live = admin_http::get(admin, "/v1/health", timeout)?;
    let ready = admin_http::get(admin, "/v1/health/ready", timeout)?;
    let mut out = format!(
        "live   {} ({})\nready  {} ({})\n",
        live.status == 200,
        live.body.trim(),
        ready.status == 200,
        ready.body.trim()
    );
    let status = admin_http::get(admin, "/v1/status", timeout)?;
    if status.status == 200 {
        out.push_str(&render_status(&status.body));
    } else {
        out.push_str(&format!("/v1/status answered HTTP {}\n", status.status));
    }
    let outcome = if live.status == 200 && ready.status == 200 {
        Outcome::Ok
    } else {
        out.push_str(
            "not ready: the broker is starting, stopping or has no cluster metadata yet\n",
        );
        Outcome::Problems
    };
    Ok((out, outcome))
}

/// `/v1/status` JSON as text: node, cluster and a row per shard (pure).
pub fn render_status(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return format!("status (not JSON): {}\n", body.trim());
    };
    let field = |v: &serde_json::Value, k: &str| match v.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(x) => x.to_string(),
        None => "-".into(),
    };
    let mut out = format!(
        "node   {}\ncluster {}\n",
        field(&v, "node_id"),
        field(&v, "cluster_id")
    );
    if let Some(shards) = v.get("shards").and_then(|s| s.as_array()) {
        let mut t = Table::new(&["SHARD", "PARTITIONS", "GROUPS", "CONNECTIONS", "LOG-BYTES"]);
        for s in shards {
            t.row(
                ["shard", "partitions", "groups", "connections", "log_bytes"]
                    .iter()
                    .map(|k| field(s, k))
                    .collect(),
            );
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_renders_shards() {
        let body = r#"{"node_id":0,"cluster_id":"abc","shards":[{"shard":0,"partitions":3,"groups":1,"connections":2,"log_bytes":4096}]}"#;
        let text = render_status(body);
        assert!(text.contains("cluster abc"), "{text}");
        let last: Vec<&str> = text
            .lines()
            .last()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(last, ["0", "3", "1", "2", "4096"]);
        assert!(render_status("oops").contains("not JSON"));
    }
}
