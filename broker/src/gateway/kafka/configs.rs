//! DescribeConfigs, IncrementalAlterConfigs and AlterConfigs for topics (and a read-only
//! view of the broker's own configs). Every config a topic has is described, defaults
//! included, with its source (KAFKA-NOTES.md, Topics and configs).

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{topics, Ctx, FramingError};
use crate::cluster::metadata::Command;
use crate::cluster::topic_config::{self, TOPIC_CONFIGS};
use crate::common::errors::code;
use crate::shard::Shard;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// ConfigSource values.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// DescribeConfigs.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: DescribeConfigsRequest = ctx.decode(body)?;
    let meta = shard.metadata();
    let results = req
        .resources
        .iter()
        .map(|r| {
            let name = r.resource_name.as_str();
            let keys: Option<Vec<&str>> = r
                .configuration_keys
                .as_ref()
                .map(|k| k.iter().map(|k| k.as_str()).collect());
            let wanted = |k: &str| keys.as_ref().is_none_or(|ks| ks.contains(&k));
            let base = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            match r.resource_type {
                RESOURCE_TOPIC => match meta.topics.get(name) {
                    None => base
                        .with_error_code(code::UNKNOWN_TOPIC_OR_PARTITION)
                        .with_error_message(Some(s(format!("topic {name} does not exist")))),
                    Some(t) => base.with_configs(
                        topic_config_values(&shard.config, &t.configs)
                            .into_iter()
                            .filter(|c| wanted(c.name))
                            .map(|c| {
                                let doc = req.include_documentation.then_some(c.doc);
                                entry(c.name, c.value, c.source, false, c.kind, doc)
                            })
                            .collect(),
                    ),
                },
                RESOURCE_BROKER if name.is_empty() || name == shard.config.node_id.to_string() => {
                    base.with_configs(
                        broker_configs(shard)
                            .into_iter()
                            .filter(|(k, ..)| wanted(k))
                            .map(|(k, v, kind)| entry(k, v, SOURCE_STATIC_BROKER, true, kind, None))
                            .collect(),
                    )
                }
                _ => base
                    .with_error_code(code::INVALID_REQUEST)
                    .with_error_message(Some(s("unsupported resource"))),
            }
        })
        .collect();
    // config_type and documentation exist from v3 only.
    let results: Vec<DescribeConfigsResult> = if ctx.version >= 3 {
        results
    } else {
        let d = DescribeConfigsResourceResult::default();
        results
            .into_iter()
            .map(|mut r: DescribeConfigsResult| {
                for c in &mut r.configs {
                    c.config_type = d.config_type;
                    c.documentation = d.documentation.clone();
                }
                r
            })
            .collect()
    };
    ctx.respond(&DescribeConfigsResponse::default().with_results(results))
}

/// One config of a topic as DescribeConfigs and CreateTopics (v5+) show it.
pub struct TopicConfigValue {
    pub name: &'static str,
    pub value: String,
    /// The ConfigSource: set on the topic, a broker setting, or Kafka's default.
    pub source: i8,
    /// The ConfigType code.
    pub kind: i8,
    pub doc: &'static str,
}

/// Every config a topic has, defaults included, in TOPIC_CONFIGS order: `set` holds the
/// ones set on the topic, the rest come from the broker's settings or Kafka's defaults.
pub fn topic_config_values(
    config: &crate::common::config::Config,
    set: &BTreeMap<String, String>,
) -> Vec<TopicConfigValue> {
    TOPIC_CONFIGS
        .iter()
        .map(|d| {
            let (default, from_broker) = topic_config::default_value(config, d.name);
            let (value, source) = match set.get(d.name) {
                Some(v) => (v.clone(), SOURCE_TOPIC),
                None if from_broker => (default, SOURCE_STATIC_BROKER),
                None => (default, SOURCE_DEFAULT),
            };
            TopicConfigValue {
                name: d.name,
                value,
                source,
                kind: d.kind.code(),
                doc: d.doc,
            }
        })
        .collect()
}

fn entry(
    name: &str,
    value: String,
    source: i8,
    read_only: bool,
    kind: i8,
    doc: Option<&str>,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(s(name))
        .with_value(Some(s(value)))
        .with_read_only(read_only)
        .with_config_source(source)
        .with_is_sensitive(false)
        .with_config_type(kind)
        .with_documentation(doc.map(s))
}

fn broker_configs(shard: &Shard) -> Vec<(&'static str, String, i8)> {
    let c = &shard.config;
    vec![
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            1,
        ),
        ("broker.id", c.node_id.to_string(), 3),
        ("log.segment.bytes", c.segment_bytes.to_string(), 3),
        ("fetch.max.bytes", c.fetch_max_bytes.to_string(), 3),
        ("message.max.bytes", c.message_max_bytes.to_string(), 3),
        ("num.partitions", c.num_partitions.to_string(), 3),
    ]
}

/// One resource's requested change: `(name, Some(value))` sets, `(name, None)` deletes.
type Change = (String, Option<String>);

/// A resource to alter: (resource type, name, its changes or why they are invalid,
/// whether the changes replace every override).
type AlterResource = (i8, String, Result<Vec<Change>, String>, bool);

/// Validates and commits config changes per topic resource; returns (code, message).
async fn alter(
    shard: &Rc<Shard>,
    resources: Vec<AlterResource>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let meta = shard.metadata();
    let mut out = Vec::with_capacity(resources.len());
    let mut cmds = Vec::new();
    let mut slots = Vec::new();
    for (kind, name, changes, replace) in resources {
        if kind != RESOURCE_TOPIC {
            out.push((
                code::INVALID_REQUEST,
                Some("only topic configs can be altered".to_string()),
            ));
            continue;
        }
        let Some(topic) = meta.topics.get(&name) else {
            out.push((
                code::UNKNOWN_TOPIC_OR_PARTITION,
                Some(format!("topic {name} does not exist")),
            ));
            continue;
        };
        let changes = match changes {
            Ok(c) => c,
            Err(m) => {
                out.push((code::INVALID_CONFIG, Some(m)));
                continue;
            }
        };
        let mut set = BTreeMap::new();
        let mut delete: Vec<String> = if replace {
            topic.configs.keys().cloned().collect()
        } else {
            Vec::new()
        };
        let mut error = None;
        for (k, v) in changes {
            match v {
                Some(v) => match topic_config::validate(&k, &v) {
                    Ok(()) => {
                        delete.retain(|d| d != &k);
                        set.insert(k, v);
                    }
                    Err(m) => error = Some(m),
                },
                None if topic_config::def(&k).is_none() => {
                    error = Some(format!("unknown or unsupported topic config {k}"))
                }
                None => delete.push(k),
            }
        }
        if let Some(m) = error {
            out.push((code::INVALID_CONFIG, Some(m)));
            continue;
        }
        out.push((0, None));
        if !validate_only {
            slots.push(out.len() - 1);
            cmds.push(Command::AlterConfig { name, set, delete });
        }
    }
    if !cmds.is_empty() {
        for (slot, r) in slots.into_iter().zip(topics::commit(shard, cmds).await) {
            if let Err(e) = r {
                out[slot] = (e.kafka_code(), Some(e.to_string()));
            }
        }
    }
    out
}

/// IncrementalAlterConfigs (SET and DELETE; APPEND/SUBTRACT only apply to list configs
/// with several values, which none of ours has).
pub async fn incremental(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: IncrementalAlterConfigsRequest = ctx.decode(body)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let changes = r
                .configs
                .iter()
                .map(|c| match c.config_operation {
                    0 => Ok((
                        c.name.to_string(),
                        Some(c.value.as_ref().map(|v| v.to_string()).unwrap_or_default()),
                    )),
                    1 => Ok((c.name.to_string(), None)),
                    op => Err(format!(
                        "config operation {op} is not supported for {}",
                        c.name.as_str()
                    )),
                })
                .collect();
            (r.resource_type, r.resource_name.to_string(), changes, false)
        })
        .collect();
    let results = alter(shard, resources, req.validate_only).await;
    let responses = req
        .resources
        .iter()
        .zip(results)
        .map(|(r, (code, msg))| {
            kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
                .with_error_code(code)
                .with_error_message(msg.map(s))
        })
        .collect();
    ctx.respond(&IncrementalAlterConfigsResponse::default().with_responses(responses))
}

/// AlterConfigs: replaces a topic's whole set of overrides.
pub async fn replace(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: AlterConfigsRequest = ctx.decode(body)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let changes = r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            (
                r.resource_type,
                r.resource_name.to_string(),
                Ok(changes),
                true,
            )
        })
        .collect();
    let results = alter(shard, resources, req.validate_only).await;
    let responses = req
        .resources
        .iter()
        .zip(results)
        .map(|(r, (code, msg))| {
            kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default(
            )
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone())
            .with_error_code(code)
            .with_error_message(msg.map(s))
        })
        .collect();
    ctx.respond(&AlterConfigsResponse::default().with_responses(responses))
}
