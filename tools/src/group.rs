//! `strandctl group`: list, describe (per-partition lag like `kafka-consumer-groups.sh
//! --describe`), delete, reset-offsets (ListGroups, ConsumerGroupDescribe and
//! DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups). A group of
//! either protocol is described: ConsumerGroupDescribe first (KIP-848 groups), then
//! DescribeGroups for a classic one, as Kafka's own tool does.
//!
//! Invariant: `reset-offsets` computes its whole plan with the pure [`plan`] before
//! anything is written, prints it, and commits only with `--execute` and only when the
//! group has no active members (Kafka's rule: a live consumer would overwrite the reset
//! with its next commit).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerProtocolAssignment, DeleteGroupsRequest,
    DescribeGroupsRequest, GroupId, ListGroupsRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::cli::{GroupCmd, ResetArgs, ResetTarget};
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::offsets::{self, TopicPartition};
use crate::output::{or_dash, Table};
use crate::Refused;

/// Runs a `group` subcommand and returns what to print.
pub fn run(
    client: &mut KafkaClient,
    cmd: &GroupCmd,
    admin: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    match cmd {
        GroupCmd::List => Ok(list(client, timeout)?),
        GroupCmd::Describe { group } => {
            let mut coord = offsets::coordinator(client, group, timeout)?;
            let out = describe(client, &mut coord, group)?;
            if !out.share {
                return Ok(out.text);
            }
            // A share group: its start offsets (DescribeShareGroupOffsets at the coordinator)
            // and records in flight and archived (from the admin API).
            let starts = share_start_offsets(coord.as_mut().unwrap_or(&mut *client), group)?;
            let (counts, notes) = share_counts_everywhere(client, group, admin, timeout)?;
            let mut text = out.text + "\n";
            text.push_str(&share_counts_table(&out.partitions, &starts, &counts).render());
            for note in notes {
                text.push_str(&format!("({note})\n"));
            }
            Ok(text)
        }
        GroupCmd::Delete { groups } => Ok(delete(client, groups, timeout)?),
        GroupCmd::ResetOffsets(args) => {
            let mut coord = offsets::coordinator(client, &args.group, timeout)?;
            reset_offsets(client, &mut coord, args)
        }
    }
}

fn group_id(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

/// Every broker's ListGroups, merged: a broker lists the groups it coordinates (a cluster
/// spreads them over its nodes); an unreachable broker is reported on stderr and skipped.
fn list(client: &mut KafkaClient, timeout: Duration) -> Result<String, KafkaError> {
    use kafka_protocol::messages::MetadataRequest;
    let resp = client.send(&MetadataRequest::default().with_topics(Some(Vec::new())))?;
    let brokers: BTreeSet<String> = crate::topic::broker_addrs(&resp).into_values().collect();
    let mut groups: BTreeSet<Listed> = BTreeSet::new();
    for addr in brokers.iter().filter(|a| a.as_str() != client.addr()) {
        // A node that is down lists nothing; the others still answer.
        match KafkaClient::connect(addr, timeout).and_then(|mut other| list_one(&mut other)) {
            Ok(gs) => groups.extend(gs),
            Err(e) => eprintln!("strandctl: groups of {addr} not listed: {e}"),
        }
    }
    groups.extend(list_one(client)?);
    let mut table = Table::new(&["GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"]);
    let dash = |s: String| if s.is_empty() { "-".into() } else { s };
    for (g, kind, p, s) in groups {
        table.row(vec![g, dash(kind), p, dash(s)]);
    }
    Ok(table.render())
}

/// A described group of either protocol: its state, and each member's (id, host, client
/// id, assigned partitions).
struct GroupView {
    state: String,
    members: Vec<(Owner, Vec<TopicPartition>)>,
    /// A share group: its members share partitions and it commits no offsets.
    share: bool,
}

/// GROUP_ID_NOT_FOUND: ConsumerGroupDescribe's answer for a classic or unknown group.
const GROUP_ID_NOT_FOUND: i16 = 69;

fn describe_group(client: &mut KafkaClient, group: &str) -> Result<GroupView, KafkaError> {
    if client.version_of::<ConsumerGroupDescribeRequest>().is_ok() {
        let req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![group_id(group)]);
        let resp = client.send(&req)?;
        if let Some(g) = resp.groups.into_iter().next() {
            if g.error_code != GROUP_ID_NOT_FOUND {
                let what = format!("describe group {group}");
                check_code(g.error_code, &what, g.error_message.as_ref())?;
                let members = g
                    .members
                    .iter()
                    .map(|m| {
                        let owner = (
                            m.member_id.to_string(),
                            m.client_host.to_string(),
                            m.client_id.to_string(),
                        );
                        let parts = m
                            .assignment
                            .topic_partitions
                            .iter()
                            .flat_map(|t| {
                                t.partitions.iter().map(|p| (t.topic_name.to_string(), *p))
                            })
                            .collect();
                        (owner, parts)
                    })
                    .collect();
                return Ok(GroupView {
                    state: g.group_state.to_string(),
                    members,
                    share: false,
                });
            }
        }
    }
    if let Some(view) = describe_share_group(client, group)? {
        return Ok(view);
    }
    let g = describe_classic_group(client, group)?;
    let members = g
        .members
        .iter()
        .map(|m| {
            let owner = (
                m.member_id.to_string(),
                m.client_host.to_string(),
                m.client_id.to_string(),
            );
            (owner, assigned_partitions(&m.member_assignment))
        })
        .collect();
    Ok(GroupView {
        state: g.group_state.to_string(),
        members,
        share: false,
    })
}

/// A share group (KIP-932) as ShareGroupDescribe shows it; `None` when the broker does
/// not serve share groups or the group is not one.
fn describe_share_group(
    client: &mut KafkaClient,
    group: &str,
) -> Result<Option<GroupView>, KafkaError> {
    use kafka_protocol::messages::ShareGroupDescribeRequest;
    if client.version_of::<ShareGroupDescribeRequest>().is_err() {
        return Ok(None);
    }
    let req = ShareGroupDescribeRequest::default().with_group_ids(vec![group_id(group)]);
    let Some(g) = client.send(&req)?.groups.into_iter().next() else {
        return Ok(None);
    };
    if g.error_code == GROUP_ID_NOT_FOUND {
        return Ok(None);
    }
    check_code(
        g.error_code,
        &format!("describe group {group}"),
        g.error_message.as_ref(),
    )?;
    let members = g
        .members
        .iter()
        .map(|m| {
            let owner = (
                m.member_id.to_string(),
                m.client_host.to_string(),
                m.client_id.to_string(),
            );
            let parts = m
                .assignment
                .topic_partitions
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic_name.to_string(), *p)))
                .collect();
            (owner, parts)
        })
        .collect();
    Ok(Some(GroupView {
        state: format!("{} (share group)", g.group_state),
        members,
        share: true,
    }))
}

fn describe_classic_group(
    client: &mut KafkaClient,
    group: &str,
) -> Result<kafka_protocol::messages::describe_groups_response::DescribedGroup, KafkaError> {
    let resp = client.send(&DescribeGroupsRequest::default().with_groups(vec![group_id(group)]))?;
    let g = resp
        .groups
        .into_iter()
        .next()
        .ok_or_else(|| KafkaError::Broker {
            what: format!("describe group {group}"),
            name: "empty response".into(),
            code: -1,
            detail: String::new(),
        })?;
    check_code(
        g.error_code,
        &format!("describe group {group}"),
        g.error_message.as_ref(),
    )?;
    Ok(g)
}

/// The partitions in a member's `consumer` protocol assignment (empty if undecodable).
pub fn assigned_partitions(assignment: &Bytes) -> Vec<TopicPartition> {
    let Some(version) = assignment
        .first_chunk::<2>()
        .map(|v| i16::from_be_bytes(*v))
    else {
        return Vec::new();
    };
    let mut body = assignment.slice(2..);
    match ConsumerProtocolAssignment::decode(&mut body, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.to_string(), *p)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Who holds a partition: (member id, host, client id).
type Owner = (String, String, String);

/// `coord` is the group coordinator's connection, `None` when it is `client`'s broker.
/// What `describe` shows, and of a share group the partitions its members are given.
struct Described {
    text: String,
    share: bool,
    partitions: BTreeSet<TopicPartition>,
}

fn describe(
    client: &mut KafkaClient,
    coord: &mut Option<KafkaClient>,
    group: &str,
) -> anyhow::Result<Described> {
    let g = describe_group(coord.as_mut().unwrap_or(&mut *client), group)?;
    if g.share {
        let partitions = g
            .members
            .iter()
            .flat_map(|(_, ps)| ps.iter().cloned())
            .collect();
        return Ok(Described {
            text: share_table(group, &g),
            share: true,
            partitions,
        });
    }
    let committed = offsets::committed(coord.as_mut().unwrap_or(&mut *client), group, None)?;
    let mut owners: BTreeMap<TopicPartition, Owner> = BTreeMap::new();
    for (owner, parts) in &g.members {
        for tp in parts {
            owners.insert(tp.clone(), owner.clone());
        }
    }
    let partitions: BTreeSet<TopicPartition> =
        committed.keys().chain(owners.keys()).cloned().collect();
    let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
    let log_end = if partitions.is_empty() {
        BTreeMap::new()
    } else {
        offsets::list_offsets(client, &partitions, offsets::LATEST_TIMESTAMP)?
    };
    let state = g.state;
    let mut out = format!(
        "group {group}: state {}, {} member(s)\n\n",
        if state.is_empty() { "-" } else { &state },
        g.members.len()
    );
    out.push_str(&describe_table(group, &partitions, &committed, &log_end, &owners).render());
    Ok(Described {
        text: out,
        share: false,
        partitions: BTreeSet::new(),
    })
}

/// One share partition's records as a broker's /metrics counts them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShareCounts {
    /// High watermark minus the share-partition start offset.
    pub lag: Option<i64>,
    /// Delivered, not finished, available again.
    pub available: Option<i64>,
    /// Acquired by a member now.
    pub acquired: Option<i64>,
    /// Archived since the partition was loaded on that node.
    pub archived: Option<i64>,
}

/// The share partitions of `group` that a /metrics text counts (pure).
pub fn share_counts(metrics: &str, group: &str) -> BTreeMap<TopicPartition, ShareCounts> {
    let mut out: BTreeMap<TopicPartition, ShareCounts> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("strand_share_group_") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let (Some(labels), Ok(value)) = (prometheus_labels(labels), value.trim().parse::<f64>())
        else {
            continue;
        };
        let label = |k: &str| labels.get(k).map(String::as_str);
        let partition = label("partition").and_then(|p| p.parse::<i32>().ok());
        let (Some(topic), Some(partition)) = (label("topic"), partition) else {
            continue;
        };
        if label("group") != Some(group) {
            continue;
        }
        #[expect(clippy::cast_possible_truncation, reason = "counts of records")]
        let value = Some(value as i64);
        let c = out.entry((topic.to_string(), partition)).or_default();
        match (name, label("state")) {
            ("lag", _) => c.lag = value,
            ("records_in_flight", Some("available")) => c.available = value,
            ("records_in_flight", Some("acquired")) => c.acquired = value,
            ("records_archived_total", _) => c.archived = value,
            _ => {}
        }
    }
    out
}

/// The labels of a Prometheus sample (`a="x",b="y\"z"`), unescaped; `None` if malformed.
fn prometheus_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(name.to_string(), value);
        rest = after[end + 1..]
            .strip_prefix(',')
            .unwrap_or(&after[end + 1..]);
    }
    Some(labels)
}

/// The start offset of each share partition of `group` that has one
/// (DescribeShareGroupOffsets of all its topics holding a state); empty when the
/// broker does not serve it.
fn share_start_offsets(
    client: &mut KafkaClient,
    group: &str,
) -> Result<BTreeMap<TopicPartition, i64>, KafkaError> {
    use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
    use kafka_protocol::messages::DescribeShareGroupOffsetsRequest;
    if client
        .version_of::<DescribeShareGroupOffsetsRequest>()
        .is_err()
    {
        return Ok(BTreeMap::new());
    }
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        // No topics (null, not empty): every partition that holds a state for the group.
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group_id(group))
            .with_topics(None),
    ]);
    let mut out = BTreeMap::new();
    for g in client.send(&req)?.groups {
        check_code(
            g.error_code,
            &format!("offsets of share group {group}"),
            g.error_message.as_ref(),
        )?;
        for t in g.topics {
            for p in t
                .partitions
                .iter()
                .filter(|p| p.error_code == 0 && p.start_offset >= 0)
            {
                out.insert(
                    (t.topic_name.to_string(), p.partition_index),
                    p.start_offset,
                );
            }
        }
    }
    Ok(out)
}

/// The leader of every partition of `topics`, by Metadata.
fn partition_leaders<'a>(
    client: &mut KafkaClient,
    topics: impl IntoIterator<Item = &'a String>,
) -> Result<BTreeMap<TopicPartition, i32>, KafkaError> {
    let mut out = BTreeMap::new();
    for t in topics {
        let md = crate::topic::one_topic(client, t, false)?;
        for p in &md.partitions {
            out.insert((t.clone(), p.partition_index), p.leader_id.0);
        }
    }
    Ok(out)
}

/// Every node's admin API address (advertised host, admin port) from `/v1/nodes` at
/// `admin`; empty when it lists none or cannot be asked.
fn node_admins(admin: &str, timeout: Duration) -> BTreeMap<i32, String> {
    let Ok(r) = crate::admin_http::get(admin, "/v1/nodes", timeout) else {
        return BTreeMap::new();
    };
    if r.status != 200 {
        return BTreeMap::new();
    }
    node_admins_of(&r.body)
}

/// `/v1/nodes`' nodes with an admin port (pure).
pub fn node_admins_of(body: &str) -> BTreeMap<i32, String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return BTreeMap::new();
    };
    let nodes = v["nodes"].as_array().map_or(&[][..], Vec::as_slice);
    nodes
        .iter()
        .filter_map(|n| {
            let id = i32::try_from(n["id"].as_i64()?).ok()?;
            let port = n["admin_port"].as_u64().filter(|&p| p > 0)?;
            Some((id, format!("{}:{port}", n["host"].as_str()?)))
        })
        .collect()
}

/// Share counts by partition, and notes on where they came from or why some are missing.
type CountsAndNotes = (BTreeMap<TopicPartition, ShareCounts>, Vec<String>);

/// `group`'s lag, records in flight and archived per share partition, each from its
/// leader's `/metrics` (every node's admin address from `/v1/nodes` of the node at
/// `admin`; a single node, or one of an older version, lists none: then `admin`'s own
/// `/metrics`).
fn share_counts_everywhere(
    client: &mut KafkaClient,
    group: &str,
    admin: &str,
    timeout: Duration,
) -> Result<CountsAndNotes, KafkaError> {
    let mut admins = node_admins(admin, timeout);
    let everywhere = !admins.is_empty();
    if !everywhere {
        admins.insert(-1, admin.to_string());
    }
    let mut notes = Vec::new();
    let mut by_node = Vec::new();
    for (id, addr) in &admins {
        match crate::admin_http::get(addr, "/metrics", timeout) {
            Ok(r) if r.status == 200 => by_node.push((*id, share_counts(&r.body, group))),
            Ok(r) => notes.push(format!("no counts: {addr}/metrics answered {}", r.status)),
            Err(e) => notes.push(format!("no counts: {e}")),
        }
    }
    if !everywhere {
        notes.push(format!(
            "in flight and archived: /metrics of the node at {admin}"
        ));
        return Ok((by_node.into_iter().flat_map(|(_, c)| c).collect(), notes));
    }
    // A node that led a partition before may still count it: only its leader's counts.
    let topics: BTreeSet<String> = by_node
        .iter()
        .flat_map(|(_, c)| c.keys().map(|(t, _)| t.clone()))
        .collect();
    let leaders = partition_leaders(client, &topics)?;
    let counts = by_node
        .into_iter()
        .flat_map(|(id, c)| c.into_iter().map(move |(tp, n)| (id, tp, n)))
        .filter(|(id, tp, _)| leaders.get(tp) == Some(id))
        .map(|(_, tp, n)| (tp, n))
        .collect();
    notes.push("in flight and archived: /metrics of each partition's leader".into());
    Ok((counts, notes))
}

/// The share partitions table (pure): every partition given to a member or counted.
pub fn share_counts_table(
    given: &BTreeSet<TopicPartition>,
    starts: &BTreeMap<TopicPartition, i64>,
    counts: &BTreeMap<TopicPartition, ShareCounts>,
) -> Table {
    let mut table = Table::new(&[
        "TOPIC",
        "PARTITION",
        "START-OFFSET",
        "LAG",
        "IN-FLIGHT-AVAILABLE",
        "IN-FLIGHT-ACQUIRED",
        "ARCHIVED",
    ]);
    let all: BTreeSet<&TopicPartition> = given
        .iter()
        .chain(starts.keys())
        .chain(counts.keys())
        .collect();
    let show = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for tp in all {
        let c = counts.get(tp).cloned().unwrap_or_default();
        table.row(vec![
            tp.0.clone(),
            tp.1.to_string(),
            show(starts.get(tp).copied()),
            show(c.lag),
            show(c.available),
            show(c.acquired),
            // A partition counted with no archived sample has archived none there.
            show(c.archived.or(c.lag.map(|_| 0))),
        ]);
    }
    table
}

/// A share group's members and the partitions each is given (several members may share
/// one); `share_partitions` adds its lag and records in flight and archived.
fn share_table(group: &str, g: &GroupView) -> String {
    let mut table = Table::new(&["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "PARTITIONS"]);
    for ((id, host, client), parts) in &g.members {
        let parts: Vec<String> = parts.iter().map(|(t, p)| format!("{t}-{p}")).collect();
        table.row(vec![
            group.to_string(),
            id.clone(),
            host.clone(),
            client.clone(),
            if parts.is_empty() {
                "-".into()
            } else {
                parts.join(",")
            },
        ]);
    }
    format!(
        "group {group}: state {}, {} member(s)\n\n{}",
        g.state,
        g.members.len(),
        table.render()
    )
}

/// The describe table (pure).
pub fn describe_table(
    group: &str,
    partitions: &[TopicPartition],
    committed: &BTreeMap<TopicPartition, i64>,
    log_end: &BTreeMap<TopicPartition, i64>,
    owners: &BTreeMap<TopicPartition, Owner>,
) -> Table {
    let mut table = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    for tp in partitions {
        let current = committed.get(tp).copied();
        let end = log_end.get(tp).copied().filter(|o| *o >= 0);
        let lag = current.zip(end).map(|(c, e)| (e - c).max(0));
        let owner = owners.get(tp);
        table.row(vec![
            group.to_string(),
            tp.0.clone(),
            tp.1.to_string(),
            or_dash(current),
            or_dash(end),
            or_dash(lag),
            or_dash(owner.map(|o| &o.0)),
            or_dash(owner.map(|o| &o.1)),
            or_dash(owner.map(|o| &o.2)),
        ]);
    }
    table
}

/// A listed group: (group, type — `classic` or `consumer` from ListGroups v5 —, protocol
/// type, state).
type Listed = (String, String, String, String);

/// The groups one broker lists.
fn list_one(client: &mut KafkaClient) -> Result<Vec<Listed>, KafkaError> {
    let resp = client.send(&ListGroupsRequest::default())?;
    check_code(resp.error_code, "list groups", None)?;
    Ok(resp
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.to_string(),
                g.group_type.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect())
}

/// Deletes each group at its coordinator.
fn delete(
    client: &mut KafkaClient,
    groups: &[String],
    timeout: Duration,
) -> Result<String, KafkaError> {
    let mut out = String::new();
    for g in groups {
        let mut coord = offsets::coordinator(client, g, timeout)?;
        let c = coord.as_mut().unwrap_or(&mut *client);
        let resp = c.send(&DeleteGroupsRequest::default().with_groups_names(vec![group_id(g)]))?;
        for r in &resp.results {
            check_code(
                r.error_code,
                &format!("delete group {}", r.group_id.as_str()),
                None,
            )?;
            out.push_str(&format!("deleted group {}\n", r.group_id.as_str()));
        }
    }
    Ok(out)
}

/// What is known about one partition when planning a reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// Log start offset.
    pub earliest: i64,
    /// Log end offset.
    pub latest: i64,
    /// The group's committed offset.
    pub current: Option<i64>,
    /// ListOffsets answer for the target timestamp (-1: no record at or after it).
    pub at_timestamp: Option<i64>,
}

/// One planned change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedReset {
    /// Partition.
    pub tp: TopicPartition,
    /// Committed now.
    pub current: Option<i64>,
    /// To commit.
    pub new: i64,
}

/// The new offset of every partition (pure): explicit offsets are clamped into
/// `earliest..=latest`, as Kafka's tool does; a timestamp with no record at or after it
/// goes to the log end.
pub fn plan(
    target: ResetTarget,
    parts: &BTreeMap<TopicPartition, PartitionOffsets>,
) -> Vec<PlannedReset> {
    parts
        .iter()
        .map(|(tp, o)| {
            let new = match target {
                ResetTarget::Earliest => o.earliest,
                ResetTarget::Latest => o.latest,
                ResetTarget::Offset(n) => n.clamp(o.earliest, o.latest.max(o.earliest)),
                ResetTarget::TimestampMs(_) => match o.at_timestamp {
                    Some(at) if at >= 0 => at,
                    _ => o.latest,
                },
            };
            PlannedReset {
                tp: tp.clone(),
                current: o.current,
                new,
            }
        })
        .collect()
}

/// Earliest, latest, committed and (for a timestamp target) looked-up offsets.
fn partition_offsets(
    client: &mut KafkaClient,
    partitions: &[TopicPartition],
    committed: &BTreeMap<TopicPartition, i64>,
    target: ResetTarget,
) -> Result<BTreeMap<TopicPartition, PartitionOffsets>, KafkaError> {
    let earliest = offsets::list_offsets(client, partitions, offsets::EARLIEST_TIMESTAMP)?;
    let latest = offsets::list_offsets(client, partitions, offsets::LATEST_TIMESTAMP)?;
    let at_ts = match target {
        ResetTarget::TimestampMs(ts) => offsets::list_offsets(client, partitions, ts)?,
        _ => BTreeMap::new(),
    };
    Ok(partitions
        .iter()
        .map(|tp| {
            let o = PartitionOffsets {
                earliest: earliest.get(tp).copied().unwrap_or(0),
                latest: latest.get(tp).copied().unwrap_or(0),
                current: committed.get(tp).copied(),
                at_timestamp: at_ts.get(tp).copied(),
            };
            (tp.clone(), o)
        })
        .collect())
}

/// The plan as a table (pure).
pub fn plan_table(group: &str, planned: &[PlannedReset]) -> Table {
    let mut table = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "NEW-OFFSET",
    ]);
    for p in planned {
        table.row(vec![
            group.to_string(),
            p.tp.0.clone(),
            p.tp.1.to_string(),
            or_dash(p.current),
            p.new.to_string(),
        ]);
    }
    table
}

fn reset_offsets(
    client: &mut KafkaClient,
    coord: &mut Option<KafkaClient>,
    args: &ResetArgs,
) -> anyhow::Result<String> {
    let group = &args.group;
    let g = describe_group(coord.as_mut().unwrap_or(&mut *client), group)?;
    // A share group's "committed" offsets are its share partitions' start offsets.
    let committed = match g.share {
        true => share_start_offsets(coord.as_mut().unwrap_or(&mut *client), group)?,
        false => offsets::committed(coord.as_mut().unwrap_or(&mut *client), group, None)?,
    };
    let topics: BTreeSet<String> = if args.topics.is_empty() {
        committed.keys().map(|(t, _)| t.clone()).collect()
    } else {
        args.topics.iter().cloned().collect()
    };
    if topics.is_empty() {
        anyhow::bail!(
            "group {group} has no committed offsets: name the topics to reset with --topic"
        );
    }
    let mut partitions = Vec::new();
    for t in &topics {
        let md = crate::topic::one_topic(client, t, false)?;
        partitions.extend(md.partitions.iter().map(|p| (t.clone(), p.partition_index)));
    }
    partitions.sort();
    let parts = partition_offsets(client, &partitions, &committed, args.target())?;
    let planned = plan(args.target(), &parts);
    let table = plan_table(group, &planned);
    let mut out = table.render();
    if !args.execute {
        out.push_str("\ndry run: nothing changed; add --execute to commit these offsets\n");
        return Ok(out);
    }
    if !g.members.is_empty() {
        return Err(Refused(format!(
            "group {group} has {} active member(s) (state {}): stop its consumers first; \
             offsets can only be reset while a group is inactive",
            g.members.len(),
            g.state
        ))
        .into());
    }
    let new: BTreeMap<TopicPartition, i64> =
        planned.iter().map(|p| (p.tp.clone(), p.new)).collect();
    let coordinator = coord.as_mut().unwrap_or(client);
    match g.share {
        true => alter_share_offsets(coordinator, group, &new)?,
        false => offsets::commit(coordinator, group, &new)?,
    }
    out.push_str(&format!(
        "\ncommitted {} offsets for group {group}\n",
        new.len()
    ));
    Ok(out)
}

/// AlterShareGroupOffsets: share group `group`'s partitions start at `new` (the group must
/// have no members).
fn alter_share_offsets(
    client: &mut KafkaClient,
    group: &str,
    new: &BTreeMap<TopicPartition, i64>,
) -> Result<(), KafkaError> {
    use kafka_protocol::messages::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
    };
    use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, TopicName};
    let mut by_topic: BTreeMap<&str, Vec<AlterShareGroupOffsetsRequestPartition>> = BTreeMap::new();
    for ((t, p), o) in new {
        by_topic.entry(t.as_str()).or_default().push(
            AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(*p)
                .with_start_offset(*o),
        );
    }
    let topics = by_topic
        .into_iter()
        .map(|(t, ps)| {
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(StrBytes::from_string(t.to_string())))
                .with_partitions(ps)
        })
        .collect();
    let req = AlterShareGroupOffsetsRequest::default()
        .with_group_id(group_id(group))
        .with_topics(topics);
    let resp = client.send(&req)?;
    let what = format!("reset offsets of share group {group}");
    check_code(resp.error_code, &what, resp.error_message.as_ref())?;
    for t in &resp.responses {
        for p in &t.partitions {
            let what = format!(
                "{what} on {} partition {}",
                t.topic_name.as_str(),
                p.partition_index
            );
            check_code(p.error_code, &what, p.error_message.as_ref())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn check(target: ResetTarget, o: PartitionOffsets, want: i64) {
        let mut parts = BTreeMap::new();
        parts.insert(("t".to_string(), 0), o);
        let got = plan(target, &parts);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].new, want, "{target:?} {o:?}");
        assert_eq!(got[0].current, o.current);
    }

    #[test]
    fn reset_plans() {
        let o = PartitionOffsets {
            earliest: 5,
            latest: 50,
            current: Some(20),
            at_timestamp: Some(30),
        };
        check(ResetTarget::Earliest, o, 5);
        check(ResetTarget::Latest, o, 50);
        check(ResetTarget::Offset(10), o, 10);
        check(ResetTarget::Offset(1), o, 5);
        check(ResetTarget::Offset(99), o, 50);
        check(ResetTarget::TimestampMs(1), o, 30);
        let none = PartitionOffsets {
            at_timestamp: Some(-1),
            current: None,
            ..o
        };
        check(ResetTarget::TimestampMs(1), none, 50);
    }

    #[test]
    fn node_admin_addresses_come_from_registered_admin_ports() {
        let body = r#"{"nodes":[{"id":1,"host":"10.0.0.1","admin_port":9644},
            {"id":2,"host":"10.0.0.2","admin_port":0},{"id":3,"host":"h3","admin_port":9645}]}"#;
        let got = node_admins_of(body);
        assert_eq!(
            got,
            BTreeMap::from([(1, "10.0.0.1:9644".to_string()), (3, "h3:9645".to_string())])
        );
        assert!(node_admins_of("not json").is_empty());
        assert!(node_admins_of(r#"{"nodes":[]}"#).is_empty());
    }

    #[test]
    fn share_counts_come_from_the_groups_samples_only() {
        let metrics = "\
# HELP strand_share_group_lag x
strand_share_group_lag{group=\"q\",topic=\"t\",partition=\"0\"} 7
strand_share_group_lag{group=\"other\",topic=\"t\",partition=\"0\"} 99
strand_share_group_records_in_flight{group=\"q\",topic=\"t\",partition=\"0\",state=\"available\"} 2
strand_share_group_records_in_flight{group=\"q\",topic=\"t\",partition=\"0\",state=\"acquired\"} 5
strand_share_group_records_archived_total{group=\"q\",topic=\"t\",partition=\"0\"} 1
strand_share_group_lag{group=\"q\\\"x\",topic=\"t\",partition=\"1\"} 3
strand_share_group_lag{group=\"q\",topic=\"t\",partition=\"1\"} 0
strand_share_group_lag{group=\"q\",topic=\"t\" 4
strand_kafka_requests_total{shard=\"0\",api=\"produce\"} 3
";
        let counts = share_counts(metrics, "q");
        let zero = ("t".to_string(), 0);
        assert_eq!(
            counts.get(&zero),
            Some(&ShareCounts {
                lag: Some(7),
                available: Some(2),
                acquired: Some(5),
                archived: Some(1),
            })
        );
        assert_eq!(counts.len(), 2, "{counts:?}");
        assert_eq!(
            share_counts(metrics, "q\"x").len(),
            1,
            "escaped quote in a label"
        );
        let given = BTreeSet::from([("t".to_string(), 2)]);
        let starts = BTreeMap::from([(zero.clone(), 40)]);
        let text = share_counts_table(&given, &starts, &counts).render();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[1], ["t", "0", "40", "7", "2", "5", "1"]);
        assert_eq!(rows[2], ["t", "1", "-", "0", "-", "-", "0"]);
        assert_eq!(rows[3], ["t", "2", "-", "-", "-", "-", "-"]);
    }

    #[test]
    fn describe_table_computes_lag() {
        let tp = |p| ("t".to_string(), p);
        let committed: BTreeMap<_, _> = [(tp(0), 3), (tp(1), 10)].into();
        let log_end: BTreeMap<_, _> = [(tp(0), 10), (tp(1), 10), (tp(2), 4)].into();
        let owners: BTreeMap<_, _> =
            [(tp(2), ("m-1".into(), "/127.0.0.1".into(), "c".into()))].into();
        let text =
            describe_table("g", &[tp(0), tp(1), tp(2)], &committed, &log_end, &owners).render();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[1], ["g", "t", "0", "3", "10", "7", "-", "-", "-"]);
        assert_eq!(rows[2], ["g", "t", "1", "10", "10", "0", "-", "-", "-"]);
        assert_eq!(
            rows[3],
            ["g", "t", "2", "-", "4", "-", "m-1", "/127.0.0.1", "c"]
        );
    }

    #[test]
    fn assignments_decode_and_garbage_is_empty() {
        let mut b = bytes::BytesMut::new();
        b.put_i16(0); // version
        b.put_i32(1); // one topic
        b.put_i16(1);
        b.put_slice(b"t");
        b.put_i32(2); // two partitions
        b.put_i32(0);
        b.put_i32(3);
        b.put_i32(-1); // null user data
        let got = assigned_partitions(&b.freeze());
        assert_eq!(got, vec![("t".to_string(), 0), ("t".to_string(), 3)]);
        assert!(
            assigned_partitions(&Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff])).is_empty()
        );
        assert!(assigned_partitions(&Bytes::new()).is_empty());
    }
}
