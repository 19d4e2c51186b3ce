//! DescribeConfigs, IncrementalAlterConfigs and AlterConfigs for topics, groups and
//! brokers (this node's dynamic configs and the cluster default, `cluster::broker_config`).
//! Every config a topic or this node has is described, defaults included, with its source
//! (KAFKA-NOTES.md, Topics and configs).

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
use crate::cluster::metadata::{Command, Metadata};
use crate::cluster::topic_config::{self, TOPIC_CONFIGS};
use crate::cluster::{broker_config, group_config};
use crate::common::errors::code;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::Shard;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// A group's configs (KIP-848/932, `ConfigResource.Type.GROUP`).
const RESOURCE_GROUP: i8 = 32;
/// ConfigSource of a group config set for the group (`GROUP_CONFIG`).
const SOURCE_GROUP: i8 = 8;
/// ConfigType codes of group configs: STRING and INT.
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
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
            if !config_allowed(ctx, shard, acl_op::DESCRIBE_CONFIGS, r.resource_type, name) {
                return base
                    .with_error_code(denied_code(r.resource_type))
                    .with_error_message(Some(s("not authorized to describe its configs")));
            }
            match r.resource_type {
                RESOURCE_TOPIC => match meta.topics.get(name) {
                    None => base
                        .with_error_code(code::UNKNOWN_TOPIC_OR_PARTITION)
                        .with_error_message(Some(s(format!("topic {name} does not exist")))),
                    Some(t) => base.with_configs(
                        topic_config_values(shard, &t.configs)
                            .into_iter()
                            .filter(|c| wanted(c.name))
                            .map(|c| {
                                let doc = req.include_documentation.then_some(c.doc);
                                entry(c.name, c.value, c.source, false, c.kind, doc)
                            })
                            .collect(),
                    ),
                },
                RESOURCE_BROKER if name == shard.config.node_id.to_string() => base.with_configs(
                    broker_entries(shard, &meta)
                        .into_iter()
                        .filter(|e| wanted(e.name.as_str()))
                        .collect(),
                ),
                RESOURCE_BROKER if name == broker_config::CLUSTER_DEFAULT => {
                    base.with_configs(cluster_default_entries(&meta, &wanted))
                }
                RESOURCE_GROUP => base.with_configs(group_entries(shard, name, &wanted)),
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

/// A group's configs as DescribeConfigs shows them: set for the group, or the default.
fn group_entries(
    shard: &Shard,
    group: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    group_config::effective(&shard.config, shard.metadata().group_configs.get(group))
        .into_iter()
        .filter(|(k, ..)| wanted(k))
        .map(|(k, v, default)| {
            let source = if default {
                SOURCE_DEFAULT
            } else {
                SOURCE_GROUP
            };
            let kind = if k.ends_with(".ms") {
                TYPE_INT
            } else {
                TYPE_STRING
            };
            entry(k, v, source, false, kind, None)
        })
        .collect()
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
/// ones set on the topic, the rest come from this node's dynamic broker configs, its
/// static settings, or Kafka's defaults.
pub fn topic_config_values(shard: &Shard, set: &BTreeMap<String, String>) -> Vec<TopicConfigValue> {
    let meta = shard.metadata();
    let dynamic = broker_config::dynamic_values(&meta.broker_configs, shard.config.node_id);
    TOPIC_CONFIGS
        .iter()
        .map(|d| {
            let (default, from_broker) = topic_config::default_value(&shard.config, d.name);
            let set_dynamically = broker_config::synonym_of(d.name).and_then(|b| dynamic.get(b));
            let (value, source) = match (set.get(d.name), set_dynamically) {
                (Some(v), _) => (v.clone(), SOURCE_TOPIC),
                (None, Some(&(v, source))) => (v.to_string(), source),
                (None, None) if from_broker => (default, SOURCE_STATIC_BROKER),
                (None, None) => (default, SOURCE_DEFAULT),
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

/// The cluster default's configs as DescribeConfigs shows them: only what is set
/// dynamically, as Kafka.
fn cluster_default_entries(
    meta: &Metadata,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    meta.broker_configs
        .get(broker_config::CLUSTER_DEFAULT)
        .into_iter()
        .flatten()
        .filter(|(k, _)| wanted(k))
        .map(|(k, v)| {
            let kind = broker_config::def(k).map_or(TYPE_STRING, |d| d.kind.code());
            let source = broker_config::SOURCE_DYNAMIC_DEFAULT;
            entry(k, v.clone(), source, false, kind, None)
        })
        .collect()
}

/// This node's broker configs as DescribeConfigs shows them: its static settings, and
/// every dynamic config with the value it runs with (set for this node, the cluster
/// default, the static setting or Kafka's default); only the dynamic ones are writable.
fn broker_entries(shard: &Shard, meta: &Metadata) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = broker_config::dynamic_values(&meta.broker_configs, shard.config.node_id);
    let mut values: BTreeMap<&str, (String, i8, i8)> = static_broker_configs(shard)
        .into_iter()
        .map(|(k, v, kind)| (k, (v, SOURCE_STATIC_BROKER, kind)))
        .collect();
    for d in broker_config::DYNAMIC_CONFIGS {
        let fallback = || match d.topic {
            Some(t) => match topic_config::default_value(&shard.config, t) {
                (v, true) => (v, SOURCE_STATIC_BROKER),
                (v, false) => (v, SOURCE_DEFAULT),
            },
            None => (d.default.to_string(), SOURCE_DEFAULT),
        };
        let (value, source) = match dynamic.get(d.name) {
            Some(&(v, source)) => (v.to_string(), source),
            None => values
                .get(d.name)
                .map_or_else(fallback, |(v, source, _)| (v.clone(), *source)),
        };
        values.insert(d.name, (value, source, d.kind.code()));
    }
    values
        .into_iter()
        .map(|(k, (v, source, kind))| {
            let read_only = broker_config::def(k).is_none();
            entry(k, v, source, read_only, kind, None)
        })
        .collect()
}

/// The broker's settings from its flags and file, as (name, value, ConfigType code).
fn static_broker_configs(shard: &Shard) -> Vec<(&'static str, String, i8)> {
    let c = &shard.config;
    vec![
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            1,
        ),
        ("broker.id", c.node_id.to_string(), 3),
        ("log.segment.bytes", c.segment_bytes.to_string(), 3),
        // The cleaner's settings: topics without overrides get these (Kafka's defaults).
        ("log.cleaner.enable", "true".to_string(), 1),
        (
            "log.cleaner.backoff.ms",
            c.log_cleaner_backoff_ms.to_string(),
            5,
        ),
        (
            "log.cleaner.io.max.bytes.per.second",
            // Kafka's default is Double.MaxValue: no cap.
            c.log_cleaner_io_max_bytes_per_second.map_or_else(
                || "1.7976931348623157E308".to_string(),
                |v| format!("{v}.0"),
            ),
            6,
        ),
        ("log.cleanup.policy", "delete".to_string(), 7),
        (
            "log.cleaner.delete.retention.ms",
            crate::partition::cleaner::DELETE_RETENTION_MS_DEFAULT.to_string(),
            5,
        ),
        (
            "log.cleaner.min.cleanable.ratio",
            crate::partition::cleaner::MIN_CLEANABLE_DIRTY_RATIO_DEFAULT.to_string(),
            6,
        ),
        ("log.cleaner.min.compaction.lag.ms", "0".to_string(), 5),
        ("log.cleaner.max.compaction.lag.ms", i64::MAX.to_string(), 5),
        ("fetch.max.bytes", c.fetch_max_bytes.to_string(), 3),
        ("message.max.bytes", c.message_max_bytes.to_string(), 3),
        ("compression.type", c.compression_type.clone(), 2),
        (
            "log.message.timestamp.type",
            c.log_message_timestamp_type.clone(),
            2,
        ),
        ("min.insync.replicas", c.min_insync_replicas.to_string(), 3),
        ("num.partitions", c.num_partitions.to_string(), 3),
    ]
}

/// What a request asks of one config.
enum Op {
    /// SET (and every AlterConfigs entry).
    Set(String),
    /// DELETE: back to the default.
    Delete,
    /// APPEND: add these items to a list config (those it lacks).
    Append(String),
    /// SUBTRACT: remove these items from a list config.
    Subtract(String),
}

/// One resource's requested change of one config.
type Change = (String, Op);

/// The value a list config gets from APPEND or SUBTRACT of `items` (comma-separated) to
/// or from `current`, as Kafka computes it (items already there are not added twice).
fn list_op(current: &str, items: &str, append: bool) -> String {
    let split = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(String::from)
            .collect()
    };
    let mut list = split(current);
    for item in split(items) {
        if append && !list.contains(&item) {
            list.push(item);
        } else if !append {
            list.retain(|i| i != &item);
        }
    }
    list.join(",")
}

/// A resource to alter: (resource type, name, its changes or why they are invalid,
/// whether the changes replace every override).
type AlterResource = (i8, String, Result<Vec<Change>, String>, bool);

/// Validates and commits config changes per topic resource; returns (code, message).
/// Whether `ctx` may do `operation` on the configs of a resource: a topic's, or the
/// broker's (authorized on the cluster, as Kafka).
fn config_allowed(ctx: &Ctx, shard: &Shard, operation: i8, resource_type: i8, name: &str) -> bool {
    if resource_type == RESOURCE_TOPIC {
        ctx.allowed(shard, operation, resource::TOPIC, name)
    } else if resource_type == RESOURCE_GROUP {
        ctx.allowed(shard, operation, resource::GROUP, name)
    } else {
        ctx.allowed_on_cluster(shard, operation)
    }
}

/// The error of a config resource the caller may not touch.
fn denied_code(resource_type: i8) -> i16 {
    if resource_type == RESOURCE_TOPIC {
        code::TOPIC_AUTHORIZATION_FAILED
    } else if resource_type == RESOURCE_GROUP {
        code::GROUP_AUTHORIZATION_FAILED
    } else {
        code::CLUSTER_AUTHORIZATION_FAILED
    }
}

/// `alter` of the resources `ctx` may ALTER_CONFIGS; the others answer the authorization
/// error, in request order.
async fn alter_allowed(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    resources: Vec<AlterResource>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let allowed: Vec<Option<i8>> = resources
        .iter()
        .map(|(kind, name, ..)| {
            let ok = config_allowed(ctx, shard, acl_op::ALTER_CONFIGS, *kind, name);
            (!ok).then_some(*kind)
        })
        .collect();
    let permitted = resources
        .into_iter()
        .zip(&allowed)
        .filter(|(_, denied)| denied.is_none())
        .map(|(r, _)| r)
        .collect();
    let mut done = alter(shard, permitted, validate_only).await.into_iter();
    allowed
        .into_iter()
        .map(|denied| match denied {
            Some(kind) => (
                denied_code(kind),
                Some("not authorized to alter its configs".into()),
            ),
            None => done.next().unwrap_or((code::UNKNOWN_SERVER_ERROR, None)),
        })
        .collect()
}

async fn alter(
    shard: &Rc<Shard>,
    resources: Vec<AlterResource>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let topics = resources
        .iter()
        .filter(|r| r.0 == RESOURCE_TOPIC)
        .map(|r| r.1.as_str());
    let meta = super::topics::metadata_naming(shard, topics).await;
    let mut out = Vec::with_capacity(resources.len());
    let mut cmds = Vec::new();
    let mut slots = Vec::new();
    for (kind, name, changes, replace) in resources {
        let change = match kind {
            RESOURCE_GROUP if !replace => {
                group_change(&name, changes).map_err(|m| (code::INVALID_CONFIG, m))
            }
            RESOURCE_BROKER => broker_change(shard, &meta, &name, changes, replace),
            RESOURCE_TOPIC => topic_change(shard, &meta, name, changes, replace),
            _ => Err((
                code::INVALID_REQUEST,
                "only topic, broker and group configs can be altered".to_string(),
            )),
        };
        match change {
            Ok(cmd) => {
                out.push((0, None));
                if !validate_only {
                    slots.push(out.len() - 1);
                    cmds.push(cmd);
                }
            }
            Err((code, m)) => out.push((code, Some(m))),
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

/// A topic's config changes as the command that makes them, checked; the error is
/// (code, message).
fn topic_change(
    shard: &Shard,
    meta: &Metadata,
    name: String,
    changes: Result<Vec<Change>, String>,
    replace: bool,
) -> Result<Command, (i16, String)> {
    let Some(topic) = meta.topics.get(&name) else {
        let m = format!("topic {name} does not exist");
        return Err((code::UNKNOWN_TOPIC_OR_PARTITION, m));
    };
    let changes = changes.map_err(|m| (code::INVALID_CONFIG, m))?;
    let (set, delete) = resolve(&shard.config, &topic.configs, changes, replace)
        .map_err(|m| (code::INVALID_CONFIG, m))?;
    Ok(Command::AlterConfig { name, set, delete })
}

/// A group's config changes (SET and DELETE only) as the command that makes them, checked.
fn group_change(group: &str, changes: Result<Vec<Change>, String>) -> Result<Command, String> {
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    for (k, op) in changes? {
        match op {
            Op::Set(v) => {
                set.insert(k, v);
            }
            Op::Delete => delete.push(k),
            Op::Append(_) | Op::Subtract(_) => {
                return Err(format!(
                    "{k} is not a list: APPEND and SUBTRACT do not apply"
                ))
            }
        }
    }
    group_config::validate(&set)?;
    Ok(Command::AlterGroupConfig {
        group: group.to_string(),
        set,
        delete,
    })
}

/// A broker resource's config changes (this node's id, or "" for the cluster default) as
/// the command that makes them, checked; `replace` (AlterConfigs) drops every dynamic
/// value of the resource it does not set again. The error is (code, message).
fn broker_change(
    shard: &Shard,
    meta: &Metadata,
    name: &str,
    changes: Result<Vec<Change>, String>,
    replace: bool,
) -> Result<Command, (i16, String)> {
    let me = shard.config.node_id.to_string();
    if name != me && name != broker_config::CLUSTER_DEFAULT {
        // Kafka's clients send a broker's configs to that broker.
        let m = format!("this is node {me}: a broker resource names this node, or is empty for the cluster default; got '{name}'");
        return Err((code::INVALID_REQUEST, m));
    }
    let changes = changes.map_err(|m| (code::INVALID_CONFIG, m))?;
    let refused = |e: broker_config::Refusal| (e.kafka_code(), e.to_string());
    let own = meta.broker_configs.get(name);
    // What APPEND and SUBTRACT start from: the resource's value, else what it inherits.
    let inherited = |k: &str| -> String {
        let default = meta
            .broker_configs
            .get(broker_config::CLUSTER_DEFAULT)
            .filter(|_| name != broker_config::CLUSTER_DEFAULT)
            .and_then(|d| d.get(k));
        match (default, broker_config::def(k)) {
            (Some(v), _) => v.clone(),
            (None, Some(d)) => d.topic.map_or_else(
                || d.default.to_string(),
                |t| topic_config::default_value(&shard.config, t).0,
            ),
            (None, None) => String::new(),
        }
    };
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    let mut delete: Vec<String> = if replace {
        own.map(|o| o.keys().cloned().collect()).unwrap_or_default()
    } else {
        Vec::new()
    };
    for (k, op) in changes {
        let def = broker_config::def(&k)
            .ok_or_else(|| refused(broker_config::Refusal::NotDynamic(k.clone())))?;
        let now = |set: &BTreeMap<String, String>| {
            set.get(&k)
                .or(own.and_then(|o| o.get(&k)))
                .cloned()
                .unwrap_or_else(|| inherited(&k))
        };
        let value = match op {
            Op::Set(v) => Some(v),
            Op::Delete => None,
            Op::Append(_) | Op::Subtract(_) if def.kind != topic_config::Kind::List => {
                let m = format!("{k} is not a list config: APPEND and SUBTRACT do not apply");
                return Err((code::INVALID_CONFIG, m));
            }
            Op::Append(v) => Some(list_op(&now(&set), &v, true)),
            Op::Subtract(v) => Some(list_op(&now(&set), &v, false)),
        };
        match value {
            Some(v) => {
                broker_config::validate(&k, &v).map_err(refused)?;
                delete.retain(|d| d != &k);
                set.insert(k, v);
            }
            None => delete.push(k),
        }
    }
    Ok(Command::AlterBrokerConfig {
        broker: name.to_string(),
        set,
        delete,
    })
}

/// A topic's config changes as the overrides to set and the ones to delete, checked
/// (each value, and what holds between them); `current` holds its overrides now, all of
/// which `replace` drops unless set again (AlterConfigs). The error is INVALID_CONFIG's
/// message.
fn resolve(
    config: &crate::common::config::Config,
    current: &BTreeMap<String, String>,
    changes: Vec<Change>,
    replace: bool,
) -> Result<(BTreeMap<String, String>, Vec<String>), String> {
    let mut set = BTreeMap::new();
    let mut delete: Vec<String> = if replace {
        current.keys().cloned().collect()
    } else {
        Vec::new()
    };
    for (k, op) in changes {
        let now = |set: &BTreeMap<String, String>| {
            set.get(&k)
                .or(current.get(&k))
                .cloned()
                .unwrap_or_else(|| topic_config::default_value(config, &k).0)
        };
        let is_list = topic_config::def(&k).is_some_and(|d| d.kind == topic_config::Kind::List);
        let value = match op {
            Op::Set(v) => Some(v),
            Op::Delete => None,
            Op::Append(_) | Op::Subtract(_) if !is_list => {
                return Err(format!(
                    "{k} is not a list config: APPEND and SUBTRACT do not apply"
                ));
            }
            Op::Append(v) => Some(list_op(&now(&set), &v, true)),
            Op::Subtract(v) => Some(list_op(&now(&set), &v, false)),
        };
        match value {
            Some(v) => {
                topic_config::validate(&k, &v)?;
                delete.retain(|d| d != &k);
                set.insert(k, v);
            }
            None if topic_config::def(&k).is_none() => {
                return Err(format!("unknown or unsupported topic config {k}"));
            }
            None => delete.push(k),
        }
    }
    let mut all = current.clone();
    all.retain(|k, _| !delete.contains(k));
    all.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    topic_config::validate_set(&all)?;
    Ok((set, delete))
}

/// IncrementalAlterConfigs: SET, DELETE, and APPEND/SUBTRACT on list configs
/// (`cleanup.policy`).
pub async fn incremental(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: IncrementalAlterConfigsRequest = ctx.decode(body)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let changes = r
                .configs
                .iter()
                .map(|c| {
                    let v = || c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                    match c.config_operation {
                        0 => Ok((c.name.to_string(), Op::Set(v()))),
                        1 => Ok((c.name.to_string(), Op::Delete)),
                        2 => Ok((c.name.to_string(), Op::Append(v()))),
                        3 => Ok((c.name.to_string(), Op::Subtract(v()))),
                        op => Err(format!(
                            "config operation {op} is not supported for {}",
                            c.name.as_str()
                        )),
                    }
                })
                .collect();
            (r.resource_type, r.resource_name.to_string(), changes, false)
        })
        .collect();
    let results = alter_allowed(shard, ctx, resources, req.validate_only).await;
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
                .map(|c| {
                    let op = match &c.value {
                        Some(v) => Op::Set(v.to_string()),
                        None => Op::Delete,
                    };
                    (c.name.to_string(), op)
                })
                .collect();
            (
                r.resource_type,
                r.resource_name.to_string(),
                Ok(changes),
                true,
            )
        })
        .collect();
    let results = alter_allowed(shard, ctx, resources, req.validate_only).await;
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
