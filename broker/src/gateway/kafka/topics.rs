//! CreateTopics and DeleteTopics, and topic creation for auto-create.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::{place_partitions, Command, MetaError, PARTITIONS_PER_TOPIC_MAX};
use crate::cluster::ClusterHost;
use crate::common::errors::code;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// The longest a topic creation (or a new partition) waits for its partitions' first
/// leaders before it answers (`wait_for_leaders`).
pub const NEW_LEADERS_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How often `wait_for_leaders` looks.
const NEW_LEADERS_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// Cluster mode: waits, at most `wait`, until this shard knows each of `topics` (created or
/// grown a moment ago) with at least its partition count and a leader for every partition,
/// so that a client told the topic exists finds a leader for each partition (Kafka's
/// controller names the leaders in the record that creates the topic; here each
/// partition's Raft group elects its first leader once started).
pub async fn wait_for_leaders(
    shard: &Rc<Shard>,
    topics: &[(String, usize)],
    wait: std::time::Duration,
) {
    if !shard.clustered() || topics.is_empty() {
        return;
    }
    let deadline = crate::common::clock::now() + wait;
    loop {
        let meta = shard.metadata();
        let led = topics.iter().all(|(n, partitions)| {
            // A topic (or partition count) this shard has not applied yet (shard 0 applies
            // the controller log before it publishes to the others) is not led here yet.
            meta.topics.get(n).is_some_and(|t| {
                t.shards.len() >= *partitions
                    && (0..t.shards.len() as i32)
                        .all(|p| shard.leader_of_group(t.group_of(p)).0 >= 0)
            })
        });
        if led || crate::common::clock::now() >= deadline || shard.stopping() {
            return;
        }
        crate::runtime::task::sleep(NEW_LEADERS_POLL).await;
    }
}

/// The wait of a request whose `timeout_ms` says how long the client waits for the
/// creation: none for 0 or less (Kafka then only starts it), at most `NEW_LEADERS_WAIT_MAX`.
fn leaders_wait(timeout_ms: i32) -> std::time::Duration {
    let ms = u64::try_from(timeout_ms).unwrap_or(0);
    std::time::Duration::from_millis(ms).min(NEW_LEADERS_WAIT_MAX)
}

/// Commits metadata commands on shard 0 (the metadata log's home).
pub async fn commit(shard: &Rc<Shard>, cmds: Vec<Command>) -> Vec<Result<(), MetaError>> {
    let n = cmds.len();
    match shard.call(0, Op::MetaCommands(cmds)).await {
        Reply::Meta(r) => r,
        _ => (0..n)
            .map(|_| Err(MetaError::UnknownTopic("metadata shard unavailable".into())))
            .collect(),
    }
}

/// The shard's metadata for a request that changes the topics `names`. Cluster mode: when
/// one is unknown here, this node first catches up with the controller log
/// (`cluster::catch_up`): Kafka forwards topic changes to its active controller, so a topic
/// whose creation another node answered a moment ago must not be unknown here.
pub async fn metadata_naming<'n>(
    shard: &Rc<Shard>,
    names: impl IntoIterator<Item = &'n str>,
) -> std::sync::Arc<crate::cluster::metadata::Metadata> {
    let meta = shard.metadata();
    if !shard.clustered() {
        return meta;
    }
    let missing: Vec<String> = names
        .into_iter()
        .filter(|n| !meta.topics.contains_key(*n))
        .map(str::to_string)
        .collect();
    if missing.is_empty() {
        return meta;
    }
    shard.call(0, Op::CatchUpTopics(missing)).await;
    shard.metadata()
}

/// A CreateTopic command with placement and a fresh id; `replication_factor` -1 means
/// the configured default. Without replication (no seeds) there are no replica lists.
pub fn create_command(
    shard: &Shard,
    name: &str,
    partitions: usize,
    configs: BTreeMap<String, String>,
    replication_factor: i16,
) -> Command {
    Command::CreateTopic {
        name: name.to_string(),
        id: uuid::Uuid::new_v4().as_u128(),
        shards: place_partitions(name, 0, partitions, shard.count),
        configs,
        replicas: replicas_for(shard, name, 0, partitions, replication_factor),
    }
}

/// Replica lists for new partitions (cluster mode), over the nodes the cluster has.
pub fn replicas_for(
    shard: &Shard,
    name: &str,
    first: usize,
    count: usize,
    replication_factor: i16,
) -> Vec<Vec<i32>> {
    if !shard.clustered() {
        return Vec::new();
    }
    let nodes = cluster_nodes(shard);
    let factor = if replication_factor == -1 {
        shard.config.default_replication_factor
    } else {
        replication_factor
    };
    crate::cluster::metadata::place_replicas(name, first, count, &nodes, factor.max(1) as usize)
}

/// The cluster's nodes: the seeds and every node that registered or joined, by id.
fn cluster_nodes(shard: &Shard) -> Vec<i32> {
    let mut nodes: Vec<i32> = shard.config.seeds.iter().map(|&(id, _)| id).collect();
    nodes.extend(shard.committed_node_ids());
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// Largest replication factor this node can create (1 without a cluster).
pub fn replication_factor_max(shard: &Shard) -> i16 {
    if shard.clustered() {
        let nodes = i16::try_from(cluster_nodes(shard).len()).unwrap_or(i16::MAX);
        nodes.min(crate::common::config::REPLICATION_FACTOR_MAX)
    } else {
        1
    }
}

/// Partition replicas the cluster can still take (Redpanda's partition limit):
/// `topic_partitions_per_shard` per shard on every node, each node assumed to run this
/// node's shard count, less the replicas the topics already have.
pub fn replica_room(shard: &Shard) -> usize {
    let nodes = if shard.clustered() {
        cluster_nodes(shard).len().max(1)
    } else {
        1
    };
    let capacity = nodes
        .saturating_mul(shard.count)
        .saturating_mul(shard.config.topic_partitions_per_shard);
    let used: usize = shard
        .metadata()
        .topics
        .values()
        .map(|t| {
            if t.replicas.is_empty() {
                t.shards.len()
            } else {
                t.replicas.iter().map(Vec::len).sum()
            }
        })
        .sum();
    capacity.saturating_sub(used)
}

/// The replicas `partitions` new partitions take at `replication_factor` (-1: the default).
pub fn replicas_needed(shard: &Shard, partitions: usize, replication_factor: i16) -> usize {
    if !shard.clustered() {
        return partitions;
    }
    let factor = if replication_factor == -1 {
        shard.config.default_replication_factor
    } else {
        replication_factor
    };
    let factor = usize::try_from(factor.max(1)).unwrap_or(1);
    partitions.saturating_mul(factor.min(cluster_nodes(shard).len().max(1)))
}

/// Why `needed` more partition replicas are refused, or `None` when they fit in `room`.
pub fn over_limit(shard: &Shard, needed: usize, room: usize) -> Option<String> {
    (needed > room).then(|| {
        format!(
            "{needed} more partition replicas would exceed the partition limit: {room} left \
             (topic_partitions_per_shard {} per shard)",
            shard.config.topic_partitions_per_shard
        )
    })
}

/// A manual replica assignment: the partition count and each partition's replicas.
type ManualAssignment = (i32, Vec<Vec<i32>>);

/// A CreateTopics topic's manual replica assignment (Kafka's rules): `Ok(None)` without
/// one; otherwise the partition count and each partition's replicas (empty lists without
/// replication, where the only node is this one), or the error code and message.
fn manual_assignment(
    shard: &Shard,
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
) -> Result<Option<ManualAssignment>, (i16, String)> {
    let bad = |m: &str| Err((code::INVALID_REPLICA_ASSIGNMENT, m.to_string()));
    if t.assignments.is_empty() {
        return Ok(None);
    }
    if t.num_partitions != -1 || t.replication_factor != -1 {
        return Err((
            code::INVALID_REQUEST,
            "with a replica assignment, num_partitions and replication_factor must be -1".into(),
        ));
    }
    let n = t.assignments.len();
    if n > PARTITIONS_PER_TOPIC_MAX as usize {
        return Err((
            code::INVALID_PARTITIONS,
            format!("at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic"),
        ));
    }
    let mut lists: Vec<Option<Vec<i32>>> = vec![None; n];
    for a in &t.assignments {
        let Some(slot) = usize::try_from(a.partition_index)
            .ok()
            .and_then(|i| lists.get_mut(i))
        else {
            return bad("partition indexes must be 0..partitions, each once");
        };
        let ids: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
        if slot.replace(ids).is_some() {
            return bad("partition indexes must be 0..partitions, each once");
        }
    }
    let lists: Vec<Vec<i32>> = lists.into_iter().flatten().collect();
    if lists.len() != n {
        return bad("partition indexes must be 0..partitions, each once");
    }
    let lists =
        checked_replicas(shard, lists, None).map_err(|m| (code::INVALID_REPLICA_ASSIGNMENT, m))?;
    Ok(Some((i32::try_from(n).unwrap_or(i32::MAX), lists)))
}

/// Replica lists a client chose (CreateTopics and CreatePartitions assignments), by Kafka's
/// rules: each non-empty with distinct ids, all nodes of this cluster, all of one length
/// (`factor` when given, the topic's). Returns them (empty lists without replication, where
/// the only node is this one), or why they are refused (INVALID_REPLICA_ASSIGNMENT).
fn checked_replicas(
    shard: &Shard,
    lists: Vec<Vec<i32>>,
    factor: Option<usize>,
) -> Result<Vec<Vec<i32>>, String> {
    let nodes = if shard.clustered() {
        cluster_nodes(shard)
    } else {
        vec![shard.config.node_id]
    };
    let factor = factor.or_else(|| lists.first().map(Vec::len));
    for ids in &lists {
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        if ids.is_empty() || unique.len() != ids.len() || !ids.iter().all(|b| nodes.contains(b)) {
            return Err("each partition needs distinct replicas among the cluster's nodes".into());
        }
        if Some(ids.len()) != factor {
            return Err("every partition needs the topic's number of replicas".into());
        }
    }
    Ok(if shard.clustered() { lists } else { Vec::new() })
}
/// Whether `ctx` may create the topic `name`: CREATE on the cluster or on the topic.
pub fn may_create(ctx: &Ctx, shard: &Shard, name: &str) -> bool {
    ctx.allowed_on_cluster(shard, acl_op::CREATE)
        || ctx.allowed(shard, acl_op::CREATE, resource::TOPIC, name)
}

/// CreateTopics.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn create(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: CreateTopicsRequest = ctx.decode(body)?;
    let mut results = Vec::with_capacity(req.topics.len());
    let mut cmds = Vec::new();
    let mut slots = Vec::new();
    let mut room = replica_room(shard);
    for t in &req.topics {
        let name = t.name.0.as_str().to_string();
        let mut r = CreatableTopicResult::default().with_name(t.name.clone());
        let manual = manual_assignment(shard, t);
        let partitions = match &manual {
            Ok(Some((n, _))) => *n,
            _ if t.num_partitions == -1 => shard.config.num_partitions,
            _ => t.num_partitions,
        };
        let rf_max = replication_factor_max(shard);
        let bad_rf = t.replication_factor != -1 && !(1..=rf_max).contains(&t.replication_factor);
        let mut configs = BTreeMap::new();
        let mut bad_config = None;
        for c in &t.configs {
            let k = c.name.as_str();
            let v = c.value.as_ref().map(|v| v.as_str().to_string());
            match v {
                Some(v) => match crate::cluster::topic_config::validate(k, &v) {
                    Ok(()) => {
                        configs.insert(k.to_string(), v);
                    }
                    Err(m) => bad_config = Some(m),
                },
                None if crate::cluster::topic_config::def(k).is_none() => {
                    bad_config = Some(format!("unknown or unsupported topic config {k}"));
                }
                None => {}
            }
        }
        if bad_config.is_none() {
            bad_config = crate::cluster::topic_config::validate_set(&configs).err();
        }
        // Bounds first: nothing is allocated for a partition count before it is checked.
        let rf_asked = match &manual {
            Ok(Some((_, lists))) => lists.first().map_or(1, |l| l.len() as i16),
            _ => t.replication_factor,
        };
        let needed = replicas_needed(shard, usize::try_from(partitions).unwrap_or(0), rf_asked);
        if !may_create(ctx, shard, &name) {
            r = r
                .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                .with_error_message(Some(StrBytes::from_static_str(
                    "not authorized to create it",
                )));
        } else if let Err(e) = crate::cluster::metadata::validate_topic_name(&name) {
            r = r
                .with_error_code(e.kafka_code())
                .with_error_message(Some(StrBytes::from_string(e.to_string())));
        } else if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&partitions) {
            r = r
                .with_error_code(code::INVALID_PARTITIONS)
                .with_error_message(Some(StrBytes::from_string(format!(
                    "number of partitions must be in 1..={PARTITIONS_PER_TOPIC_MAX}"
                ))));
        } else if bad_rf {
            r = r
                .with_error_code(code::INVALID_REPLICATION_FACTOR)
                .with_error_message(Some(StrBytes::from_string(format!(
                    "replication factor must be in 1..={rf_max} (the nodes of this cluster)"
                ))));
        } else if let Some(m) = bad_config {
            r = r
                .with_error_code(code::INVALID_CONFIG)
                .with_error_message(Some(StrBytes::from_string(m)));
        } else if let Err((code, m)) = &manual {
            r = r
                .with_error_code(*code)
                .with_error_message(Some(StrBytes::from_string(m.clone())));
        } else if let Some(m) = over_limit(shard, needed, room) {
            r = r
                .with_error_code(code::INVALID_PARTITIONS)
                .with_error_message(Some(StrBytes::from_string(m)));
        } else {
            if !req.validate_only {
                room -= needed;
            }
            // From v5 the answer lists every config of the new topic with its source, as
            // DescribeConfigs would (AdminClient's CreateTopicsResult.config()).
            let shown = (ctx.version >= 5).then(|| created_configs(shard, &configs));
            let mut cmd = create_command(
                shard,
                &name,
                partitions as usize,
                configs,
                t.replication_factor,
            );
            if let (Ok(Some((_, lists))), Command::CreateTopic { replicas, .. }) =
                (manual, &mut cmd)
            {
                *replicas = lists;
            }
            if let Some(shown) = shown {
                r = r.with_configs(Some(shown));
                let rf = match &cmd {
                    Command::CreateTopic { replicas, .. } => {
                        replicas.first().map_or(1, |r| r.len() as i16)
                    }
                    _ => 1,
                };
                r = r
                    .with_num_partitions(partitions)
                    .with_replication_factor(rf);
            }
            if let Command::CreateTopic { id, .. } = &cmd {
                if ctx.version >= 7 {
                    r = r.with_topic_id(uuid::Uuid::from_u128(*id));
                }
            }
            if req.validate_only {
                if let Err(e) = shard.metadata().check(&cmd) {
                    r = r
                        .with_error_code(e.kafka_code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string())));
                }
            } else {
                slots.push(results.len());
                cmds.push(cmd);
            }
        }
        results.push(r);
    }
    if !cmds.is_empty() {
        let mut created = Vec::new();
        for (slot, res) in slots.into_iter().zip(commit(shard, cmds).await) {
            if let Err(e) = res {
                let r = std::mem::take(&mut results[slot]);
                results[slot] = r
                    .with_error_code(e.kafka_code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string())));
            } else {
                created.push((results[slot].name.0.to_string(), 1));
            }
        }
        wait_for_leaders(shard, &created, leaders_wait(req.timeout_ms)).await;
    }
    ctx.respond(&CreateTopicsResponse::default().with_topics(results))
}

/// The configs of a topic created with `set`, as CreateTopics v5+ lists them.
fn created_configs(shard: &Shard, set: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    super::configs::topic_config_values(shard, set)
        .into_iter()
        .map(|c| {
            CreatableTopicConfigs::default()
                .with_name(StrBytes::from_static_str(c.name))
                .with_value(Some(StrBytes::from_string(c.value)))
                .with_config_source(c.source)
        })
        .collect()
}

/// DeleteTopics (by name; by topic id from v6).
pub async fn delete(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: DeleteTopicsRequest = ctx.decode(body)?;
    let by_name = req.topic_names.iter().map(|n| n.0.as_str());
    let in_topics = req
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str()));
    let meta = metadata_naming(shard, by_name.chain(in_topics)).await;
    let mut names: Vec<(Option<TopicName>, uuid::Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.clone()), uuid::Uuid::nil()))
        .collect();
    names.extend(req.topics.iter().map(|t| (t.name.clone(), t.topic_id)));
    let mut results = Vec::with_capacity(names.len());
    let mut cmds = Vec::new();
    let mut slots = Vec::new();
    for (name, id) in names {
        let resolved = match &name {
            Some(n) => Some(n.0.as_str().to_string()),
            None => meta.topic_name_of(id.as_u128()).map(str::to_string),
        };
        let mut r = DeletableTopicResult::default()
            .with_name(name)
            .with_topic_id(id);
        match resolved {
            Some(n) if !ctx.allowed(shard, acl_op::DELETE, resource::TOPIC, &n) => {
                r = r.with_error_code(code::TOPIC_AUTHORIZATION_FAILED);
            }
            Some(n) if meta.topics.contains_key(&n) => {
                if ctx.version >= 6 {
                    r = r.with_topic_id(uuid::Uuid::from_u128(meta.topics[&n].id));
                }
                slots.push(results.len());
                cmds.push(Command::DeleteTopic {
                    name: n,
                    token: uuid::Uuid::new_v4().as_u128(),
                });
            }
            _ => {
                r = r.with_error_code(if id.is_nil() {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                } else {
                    code::UNKNOWN_TOPIC_ID
                })
            }
        }
        results.push(r);
    }
    if !cmds.is_empty() {
        for (slot, res) in slots.into_iter().zip(commit(shard, cmds).await) {
            if let Err(e) = res {
                let r = std::mem::take(&mut results[slot]);
                results[slot] = r.with_error_code(e.kafka_code());
            }
        }
    }
    ctx.respond(&DeleteTopicsResponse::default().with_responses(results))
}

/// The replicas a CreatePartitions topic's assignment chose for its `new` partitions
/// (`None`: no assignment, placement decides), or why it is refused; `rf` is the topic's.
fn chosen_replicas(
    shard: &Shard,
    t: &kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic,
    new: usize,
    rf: i16,
) -> Result<Option<Vec<Vec<i32>>>, String> {
    let Some(a) = &t.assignments else {
        return Ok(None);
    };
    if a.len() != new {
        return Err("one assignment per new partition".into());
    }
    let lists = a
        .iter()
        .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
        .collect();
    let factor = usize::try_from(rf)
        .ok()
        .filter(|_| shard.clustered())
        .or(Some(1));
    checked_replicas(shard, lists, factor).map(Some)
}

/// The topic `name` if it exists and `ctx` may ALTER it, else the error and message.
fn alterable<'m>(
    shard: &Shard,
    ctx: &Ctx,
    meta: &'m crate::cluster::metadata::Metadata,
    name: &str,
) -> Result<&'m crate::cluster::metadata::Topic, (i16, String)> {
    if !ctx.allowed(shard, acl_op::ALTER, resource::TOPIC, name) {
        let m = "not authorized to alter it".to_string();
        return Err((code::TOPIC_AUTHORIZATION_FAILED, m));
    }
    meta.topics.get(name).ok_or_else(|| {
        let m = format!("topic {name} does not exist");
        (code::UNKNOWN_TOPIC_OR_PARTITION, m)
    })
}

/// CreatePartitions: grows a topic to `count` partitions; new ones are writable at once.
pub async fn create_partitions(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let req: CreatePartitionsRequest = ctx.decode(body)?;
    let meta = metadata_naming(shard, req.topics.iter().map(|t| t.name.0.as_str())).await;
    let mut results = Vec::with_capacity(req.topics.len());
    let mut cmds = Vec::new();
    let mut slots = Vec::new();
    let mut room = replica_room(shard);
    for t in &req.topics {
        let name = t.name.0.as_str();
        let r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        let err = |code: i16, m: String| {
            r.clone()
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(m)))
        };
        let topic = match alterable(shard, ctx, &meta, name) {
            Ok(topic) => topic,
            Err((c, m)) => {
                results.push(err(c, m));
                continue;
            }
        };
        let current = topic.shards.len();
        let wanted = usize::try_from(t.count).unwrap_or(0);
        if wanted <= current || t.count > PARTITIONS_PER_TOPIC_MAX {
            results.push(err(
                code::INVALID_PARTITIONS,
                format!("topic has {current} partitions; requested {}", t.count),
            ));
            continue;
        }
        let rf = meta_rf(shard, name);
        let chosen = match chosen_replicas(shard, t, wanted - current, rf) {
            Ok(chosen) => chosen,
            Err(m) => {
                results.push(err(code::INVALID_REPLICA_ASSIGNMENT, m));
                continue;
            }
        };
        let needed = replicas_needed(shard, wanted - current, rf);
        if let Some(m) = over_limit(shard, needed, room) {
            results.push(err(code::INVALID_PARTITIONS, m));
            continue;
        }
        results.push(r);
        if !req.validate_only {
            room -= needed;
            slots.push(results.len() - 1);
            let shards = place_partitions(name, current, wanted - current, shard.count);
            cmds.push(Command::CreatePartitions {
                name: name.to_string(),
                shards,
                replicas: chosen
                    .unwrap_or_else(|| replicas_for(shard, name, current, wanted - current, rf)),
                from_count: Some(current),
                token: uuid::Uuid::new_v4().as_u128(),
            });
        }
    }
    if !cmds.is_empty() {
        let outcomes = commit(shard, cmds).await;
        let grown = note_grown(&req, &mut results, slots, outcomes);
        wait_for_leaders(shard, &grown, leaders_wait(req.timeout_ms)).await;
    }
    ctx.respond(&CreatePartitionsResponse::default().with_results(results))
}

/// CreatePartitions: the committed outcome of each topic at `slots` into `results`; the
/// topics grown, with their new partition counts.
fn note_grown(
    req: &CreatePartitionsRequest,
    results: &mut [CreatePartitionsTopicResult],
    slots: Vec<usize>,
    outcomes: Vec<Result<(), MetaError>>,
) -> Vec<(String, usize)> {
    let mut grown = Vec::new();
    for (slot, res) in slots.into_iter().zip(outcomes) {
        if let Err(e) = res {
            let r = std::mem::take(&mut results[slot]);
            results[slot] = r
                .with_error_code(e.kafka_code())
                .with_error_message(Some(StrBytes::from_string(e.to_string())));
        } else {
            let wanted = req.topics.get(slot).map_or(0, |t| t.count);
            grown.push((results[slot].name.0.to_string(), wanted.max(0) as usize));
        }
    }
    grown
}

/// Replication factor of an existing topic (its first partition's replica count).
fn meta_rf(shard: &Shard, name: &str) -> i16 {
    shard
        .metadata()
        .topics
        .get(name)
        .and_then(|t| t.replicas.first())
        .map_or(-1, |r| r.len() as i16)
}
