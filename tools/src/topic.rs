//! `strandctl topic`: create, list, describe, delete, alter-config, add-partitions, move,
//! moves, over the Kafka admin APIs (CreateTopics, Metadata, DescribeConfigs, DeleteTopics,
//! IncrementalAlterConfigs, CreatePartitions, Alter/ListPartitionReassignments).
//!
//! Invariant: each command sends its requests and returns the text to print; a non-zero
//! Kafka error code in any result becomes a `KafkaError::Broker` naming the topic, never
//! a success line.

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::cli::TopicCmd;
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::output::Table;

/// How long the broker may take to create or delete topics, in milliseconds.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
/// DescribeConfigs / IncrementalAlterConfigs resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
/// DescribeConfigs `config_source` of a value set on the topic itself.
const SOURCE_TOPIC: i8 = 1;

/// Runs a `topic` subcommand and returns what to print.
/// Runs a topic command; `admin` is the admin HTTP address `describe` reads compaction
/// progress from.
pub fn run(client: &mut KafkaClient, cmd: &TopicCmd, admin: &str) -> Result<String, KafkaError> {
    match cmd {
        TopicCmd::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => create(client, name, *partitions, *replication_factor, configs),
        TopicCmd::List { internal } => list(client, *internal),
        TopicCmd::Describe { name, all_configs } => {
            let mut out = describe(client, name, *all_configs)?;
            if policy(client, name)?.contains("compact") {
                out.push_str(&compaction(admin, name));
            }
            Ok(out)
        }
        TopicCmd::Delete { names } => delete(client, names),
        TopicCmd::AlterConfig { name, set, delete } => {
            alter_config(client, RESOURCE_TOPIC, name, name, set, delete)
        }
        TopicCmd::AddPartitions { name, total } => add_partitions(client, name, *total),
        TopicCmd::Move {
            name,
            partition,
            replicas,
            cancel,
        } => move_partition(client, name, *partition, (!cancel).then_some(replicas)),
        TopicCmd::Moves => list_moves(client),
    }
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Creates one topic.
pub fn create(
    client: &mut KafkaClient,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, String)],
) -> Result<String, KafkaError> {
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(str_bytes(k))
                        .with_value(Some(str_bytes(v)))
                })
                .collect(),
        );
    let req = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let resp = client.send(&req)?;
    let mut rf = replication_factor;
    for t in &resp.topics {
        check_code(
            t.error_code,
            &format!("create topic {name}"),
            t.error_message.as_ref(),
        )?;
        // CreateTopics v5+ reports what the broker chose (-1 asked for its default).
        if t.replication_factor > 0 {
            rf = t.replication_factor;
        }
    }
    let rf = if rf < 0 {
        "the broker's default".to_string()
    } else {
        rf.to_string()
    };
    Ok(format!(
        "created topic {name} with {partitions} partitions, replication factor {rf}\n"
    ))
}

/// Metadata for `topics` (`None` = all).
/// Topics are auto-created (where the broker allows it) only with `auto_create`.
pub fn metadata(
    client: &mut KafkaClient,
    topics: Option<&[String]>,
    auto_create: bool,
) -> Result<MetadataResponse, KafkaError> {
    let req = MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    client.send(&req)
}

/// The metadata of one topic, or the broker's error for it.
pub fn one_topic(
    client: &mut KafkaClient,
    name: &str,
    auto_create: bool,
) -> Result<MetadataResponseTopic, KafkaError> {
    let resp = metadata(client, Some(&[name.to_string()]), auto_create)?;
    topic_of(&resp, name).cloned()
}

/// Each broker's `host:port` in a Metadata response, by node id.
pub fn broker_addrs(resp: &MetadataResponse) -> std::collections::BTreeMap<i32, String> {
    resp.brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect()
}

/// Topic `name` in a Metadata response, or the broker's error for it.
pub fn topic_of<'a>(
    resp: &'a MetadataResponse,
    name: &str,
) -> Result<&'a MetadataResponseTopic, KafkaError> {
    let t = resp
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name));
    let Some(t) = t else {
        return Err(KafkaError::Broker {
            what: format!("topic {name}"),
            name: "UNKNOWN_TOPIC_OR_PARTITION".into(),
            code: 3,
            detail: ": not in the Metadata response".into(),
        });
    };
    check_code(t.error_code, &format!("topic {name}"), None)?;
    Ok(t)
}

fn list(client: &mut KafkaClient, internal: bool) -> Result<String, KafkaError> {
    let resp = metadata(client, None, false)?;
    let mut rows: Vec<(String, usize, usize, bool)> = resp
        .topics
        .iter()
        .filter(|t| internal || !t.is_internal)
        .map(|t| {
            let name = t.name.as_ref().map_or("", |n| n.as_str()).to_string();
            let rf = t.partitions.first().map_or(0, |p| p.replica_nodes.len());
            (name, t.partitions.len(), rf, t.is_internal)
        })
        .collect();
    rows.sort();
    let mut table = Table::new(&["TOPIC", "PARTITIONS", "REPLICAS", "INTERNAL"]);
    for (name, parts, rf, int) in rows {
        table.row(vec![
            name,
            parts.to_string(),
            rf.to_string(),
            int.to_string(),
        ]);
    }
    Ok(table.render())
}

fn describe(client: &mut KafkaClient, name: &str, all_configs: bool) -> Result<String, KafkaError> {
    let t = one_topic(client, name, false)?;
    let mut partitions = t.partitions.clone();
    partitions.sort_by_key(|p| p.partition_index);
    let mut out = format!(
        "topic {name}: {} partition(s), internal {}\n\n",
        partitions.len(),
        t.is_internal
    );
    let mut table = Table::new(&["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "ERROR"]);
    for p in &partitions {
        let ids = |v: &[kafka_protocol::messages::BrokerId]| {
            v.iter()
                .map(|b| b.0.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        table.row(vec![
            p.partition_index.to_string(),
            p.leader_id.0.to_string(),
            p.leader_epoch.to_string(),
            ids(&p.replica_nodes),
            ids(&p.isr_nodes),
            crate::kafka::code_name(p.error_code),
        ]);
    }
    out.push_str(&table.render());
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(str_bytes(name))
            .with_configuration_keys(None)]);
    let resp = client.send(&req)?;
    let mut configs = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
    for r in &resp.results {
        check_code(
            r.error_code,
            &format!("describe configs of {name}"),
            r.error_message.as_ref(),
        )?;
        for c in &r.configs {
            if !all_configs && c.config_source != SOURCE_TOPIC {
                continue;
            }
            let value = shown_value(c);
            configs.row(vec![
                c.name.to_string(),
                value,
                config_source_name(c.config_source).into(),
            ]);
        }
    }
    out.push('\n');
    if configs.is_empty() {
        out.push_str("no configs set on the topic (--all-configs shows the defaults)\n");
    } else {
        out.push_str(&configs.render());
    }
    Ok(out)
}

/// The topic's `cleanup.policy`.
fn policy(client: &mut KafkaClient, name: &str) -> Result<String, KafkaError> {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(str_bytes(name))
            .with_configuration_keys(Some(vec![str_bytes("cleanup.policy")]))]);
    let resp = client.send(&req)?;
    Ok(resp
        .results
        .iter()
        .flat_map(|r| &r.configs)
        .find_map(|c| c.value.as_ref().map(|v| v.to_string()))
        .unwrap_or_else(|| "delete".to_string()))
}

/// The compaction progress of the topic's partitions hosted by the node at `admin`
/// (`/v1/status`), as a table; a note when the admin API cannot be read.
fn compaction(admin: &str, name: &str) -> String {
    let timeout = std::time::Duration::from_secs(5);
    let status = match crate::admin_http::get(admin, "/v1/status", timeout) {
        Ok(r) if r.status == 200 => r.body,
        Ok(r) => return format!("\ncompaction: admin API {admin} answered {}\n", r.status),
        Err(e) => return format!("\ncompaction: {e} (--admin names the node to ask)\n"),
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&status) else {
        return format!("\ncompaction: unreadable /v1/status from {admin}\n");
    };
    let mut table = Table::new(&["PARTITION", "DIRTY_RATIO", "DIRTY_BYTES", "LAST_CLEAN_MS"]);
    let shards = v["shards"].as_array().cloned().unwrap_or_default();
    for p in shards
        .iter()
        .flat_map(|s| s["partitions"].as_array().cloned().unwrap_or_default())
    {
        if p["topic"].as_str() != Some(name) || p["compaction"].is_null() {
            continue;
        }
        let c = &p["compaction"];
        table.row(vec![
            p["partition"].to_string(),
            format!("{:.3}", c["dirty_ratio"].as_f64().unwrap_or(0.0)),
            c["dirty_bytes"].to_string(),
            c["last_clean_ms"].to_string(),
        ]);
    }
    if table.is_empty() {
        return format!("\ncompaction: no partition of {name} on the node at {admin}\n");
    }
    format!("\ncompaction (node at {admin}):\n{}", table.render())
}

/// A described config's value as printed: hidden when sensitive, `-` when null.
pub fn shown_value(
    c: &kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult,
) -> String {
    if c.is_sensitive {
        "(sensitive)".to_string()
    } else {
        c.value.as_ref().map_or("-", |v| v.as_str()).to_string()
    }
}

/// Kafka's name of a DescribeConfigs `config_source`.
pub fn config_source_name(source: i8) -> &'static str {
    match source {
        1 => "TOPIC",
        2 => "DYNAMIC_BROKER",
        3 => "DYNAMIC_DEFAULT_BROKER",
        4 => "STATIC_BROKER",
        5 => "DEFAULT",
        6 => "DYNAMIC_BROKER_LOGGER",
        7 => "CLIENT_METRICS",
        8 => "GROUP",
        _ => "UNKNOWN",
    }
}

/// Deletes the topics `names`.
pub fn delete(client: &mut KafkaClient, names: &[String]) -> Result<String, KafkaError> {
    let req = DeleteTopicsRequest::default()
        .with_topic_names(names.iter().map(|n| topic_name(n)).collect())
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let resp = client.send(&req)?;
    let mut out = String::new();
    for r in &resp.responses {
        let name = r.name.as_ref().map_or("?", |n| n.as_str());
        check_code(
            r.error_code,
            &format!("delete topic {name}"),
            r.error_message.as_ref(),
        )?;
        out.push_str(&format!("deleted topic {name}\n"));
    }
    Ok(out)
}

/// Sets and deletes configs of one resource (IncrementalAlterConfigs): a topic, or a
/// broker (`resource_type` 4: a node id, or "" for the cluster default); `label` names it
/// in what is printed.
pub fn alter_config(
    client: &mut KafkaClient,
    resource_type: i8,
    name: &str,
    label: &str,
    set: &[(String, String)],
    delete: &[String],
) -> Result<String, KafkaError> {
    let mut configs: Vec<AlterableConfig> = set
        .iter()
        .map(|(k, v)| {
            AlterableConfig::default()
                .with_name(str_bytes(k))
                .with_config_operation(OP_SET)
                .with_value(Some(str_bytes(v)))
        })
        .collect();
    configs.extend(delete.iter().map(|k| {
        AlterableConfig::default()
            .with_name(str_bytes(k))
            .with_config_operation(OP_DELETE)
            .with_value(None)
    }));
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(str_bytes(name))
            .with_configs(configs),
    ]);
    let resp = client.send(&req)?;
    for r in &resp.responses {
        check_code(
            r.error_code,
            &format!("alter configs of {label}"),
            r.error_message.as_ref(),
        )?;
    }
    let mut out = String::new();
    for (k, v) in set {
        out.push_str(&format!("{label}: set {k}={v}\n"));
    }
    for k in delete {
        out.push_str(&format!("{label}: reset {k} to its default\n"));
    }
    Ok(out)
}

fn add_partitions(client: &mut KafkaClient, name: &str, total: i32) -> Result<String, KafkaError> {
    let req = CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic_name(name))
            .with_count(total)
            .with_assignments(None)])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let resp = client.send(&req)?;
    for r in &resp.results {
        check_code(
            r.error_code,
            &format!("add partitions to {name}"),
            r.error_message.as_ref(),
        )?;
    }
    Ok(format!("{name} now has {total} partitions\n"))
}

fn move_partition(
    client: &mut KafkaClient,
    name: &str,
    partition: i32,
    replicas: Option<&Vec<i32>>,
) -> Result<String, KafkaError> {
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(topic_name(name))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(
                    replicas.map(|r| r.iter().map(|&n| BrokerId(n)).collect()),
                )])]);
    let resp = client.send(&req)?;
    check_code(
        resp.error_code,
        &format!("move {name}/{partition}"),
        resp.error_message.as_ref(),
    )?;
    for p in resp.responses.iter().flat_map(|t| &t.partitions) {
        check_code(
            p.error_code,
            &format!("move {name}/{partition}"),
            p.error_message.as_ref(),
        )?;
    }
    Ok(match replicas {
        Some(r) => format!(
            "{name}/{partition} moving to replicas {r:?} (`strandctl topic moves` until it is gone)\n"
        ),
        None => format!("{name}/{partition}: move cancelled, going back\n"),
    })
}

fn list_moves(client: &mut KafkaClient) -> Result<String, KafkaError> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(None);
    let resp = client.send(&req)?;
    check_code(resp.error_code, "list moves", resp.error_message.as_ref())?;
    let ids = |v: &[BrokerId]| {
        v.iter()
            .map(|b| b.0.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut table = Table::new(&["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"]);
    for t in &resp.topics {
        for p in &t.partitions {
            table.row(vec![
                t.name.0.to_string(),
                p.partition_index.to_string(),
                ids(&p.replicas),
                ids(&p.adding_replicas),
                ids(&p.removing_replicas),
            ]);
        }
    }
    if table.is_empty() {
        return Ok("no partition moves in progress\n".to_string());
    }
    Ok(table.render())
}
