//! `strandctl acl`: ACLs (the `kafka-acls.sh` equivalent; CreateAcls, DescribeAcls,
//! DeleteAcls). A resource is named with one of `--topic`, `--group`,
//! `--transactional-id` or `--cluster`, literally or, with `--prefixed`, as a prefix.
//!
//! Invariant: operations and permissions are Kafka's names, checked here before anything
//! is sent; `remove` removes only what matches every selector given.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;

use crate::cli::{AclCmd, AclResource};
use crate::kafka::{check_code, KafkaClient};
use crate::output::Table;
use crate::Refused;

/// Kafka's operation names by code (2 = ALL .. 14).
const OPERATIONS: [&str; 13] = [
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
    "CREATE_TOKENS",
    "DESCRIBE_TOKENS",
];
/// Kafka's resource type names by code (2 = TOPIC .. 7).
const RESOURCE_TYPES: [&str; 6] = [
    "TOPIC",
    "GROUP",
    "CLUSTER",
    "TRANSACTIONAL_ID",
    "DELEGATION_TOKEN",
    "USER",
];
/// ANY, in filters.
const ANY: i8 = 1;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn operation(name: &str) -> Result<i8, Refused> {
    OPERATIONS
        .iter()
        .position(|o| o.eq_ignore_ascii_case(&name.replace('-', "_")))
        .map(|i| i as i8 + 2)
        .ok_or_else(|| {
            Refused(format!(
                "unknown operation {name}: one of {}",
                OPERATIONS.join(", ")
            ))
        })
}

fn name_of(names: &[&str], first: i8, code: i8) -> String {
    usize::try_from(code - first)
        .ok()
        .and_then(|i| names.get(i))
        .map_or_else(|| format!("unknown({code})"), |n| (*n).to_string())
}

/// The (type, name) a resource selector names, if one is given.
fn resource(r: &AclResource) -> Result<Option<(i8, String)>, Refused> {
    let given: Vec<(i8, String)> = [
        r.topic.clone().map(|t| (2, t)),
        r.group.clone().map(|g| (3, g)),
        r.cluster.then(|| (4, "kafka-cluster".to_string())),
        r.transactional_id.clone().map(|t| (5, t)),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given.len() {
        0 => Ok(None),
        1 => Ok(given.into_iter().next()),
        _ => Err(Refused(
            "name one resource: --topic, --group, --transactional-id or --cluster".into(),
        )),
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Runs an `acl` subcommand and returns what to print.
pub fn run(client: &mut KafkaClient, cmd: &AclCmd) -> anyhow::Result<String> {
    match cmd {
        AclCmd::List {
            resource: r,
            principal,
        } => list(client, r, principal.as_deref()),
        AclCmd::Add {
            resource: r,
            principal,
            operation: ops,
            deny,
            host,
        } => {
            let Some((rtype, name)) = resource(r)? else {
                return Err(Refused("name the resource the ACL is for".into()).into());
            };
            let pattern = if r.prefixed { PREFIXED } else { LITERAL };
            let creations = ops
                .iter()
                .map(|o| {
                    Ok(AclCreation::default()
                        .with_resource_type(rtype)
                        .with_resource_name(s(&name))
                        .with_resource_pattern_type(pattern)
                        .with_principal(s(principal))
                        .with_host(s(host))
                        .with_operation(operation(o)?)
                        .with_permission_type(if *deny { DENY } else { ALLOW }))
                })
                .collect::<Result<Vec<_>, Refused>>()?;
            let n = creations.len();
            let resp = client.send(&CreateAclsRequest::default().with_creations(creations))?;
            for r in &resp.results {
                check_code(r.error_code, "create an ACL", r.error_message.as_ref())?;
            }
            Ok(format!("{n} ACL(s) created\n"))
        }
        AclCmd::Remove {
            resource: r,
            principal,
            operation: op,
        } => {
            let (rtype, name) = resource(r)?.map_or((ANY, None), |(t, n)| (t, Some(n)));
            let op = op.as_deref().map(operation).transpose()?.unwrap_or(ANY);
            let filter = DeleteAclsFilter::default()
                .with_resource_type_filter(rtype)
                .with_resource_name_filter(name.as_deref().map(s))
                .with_pattern_type_filter(pattern_filter(r, name.is_some()))
                .with_principal_filter(principal.as_deref().map(s))
                .with_host_filter(None)
                .with_operation(op)
                .with_permission_type(ANY);
            let resp = client.send(&DeleteAclsRequest::default().with_filters(vec![filter]))?;
            let mut removed = 0;
            for f in &resp.filter_results {
                check_code(f.error_code, "delete ACLs", f.error_message.as_ref())?;
                removed += f.matching_acls.len();
            }
            Ok(format!("{removed} ACL(s) removed\n"))
        }
    }
}

/// LITERAL or PREFIXED for a named resource, ANY otherwise.
fn pattern_filter(r: &AclResource, named: bool) -> i8 {
    match (named, r.prefixed) {
        (false, _) => ANY,
        (true, true) => PREFIXED,
        (true, false) => LITERAL,
    }
}

fn list(
    client: &mut KafkaClient,
    r: &AclResource,
    principal: Option<&str>,
) -> anyhow::Result<String> {
    let (rtype, name) = resource(r)?.map_or((ANY, None), |(t, n)| (t, Some(n)));
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(rtype)
        .with_resource_name_filter(name.as_deref().map(s))
        .with_pattern_type_filter(pattern_filter(r, name.is_some()))
        .with_principal_filter(principal.map(s))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY);
    let resp = client.send(&req)?;
    check_code(
        resp.error_code,
        "describe ACLs",
        resp.error_message.as_ref(),
    )?;
    let mut t = Table::new(&[
        "RESOURCE_TYPE",
        "NAME",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ]);
    for res in &resp.resources {
        for a in &res.acls {
            t.row(vec![
                name_of(&RESOURCE_TYPES, 2, res.resource_type),
                res.resource_name.to_string(),
                if res.pattern_type == PREFIXED {
                    "PREFIXED"
                } else {
                    "LITERAL"
                }
                .into(),
                a.principal.to_string(),
                a.host.to_string(),
                name_of(&OPERATIONS, 2, a.operation),
                if a.permission_type == DENY {
                    "DENY"
                } else {
                    "ALLOW"
                }
                .into(),
            ]);
        }
    }
    Ok(t.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_kafkas_codes() {
        assert_eq!(operation("ALL").ok(), Some(2));
        assert_eq!(operation("read").ok(), Some(3));
        assert_eq!(operation("describe-configs").ok(), Some(10));
        assert_eq!(operation("IDEMPOTENT_WRITE").ok(), Some(12));
        assert!(operation("FLY").is_err());
        assert_eq!(name_of(&OPERATIONS, 2, 8), "DESCRIBE");
        assert_eq!(name_of(&RESOURCE_TYPES, 2, 5), "TRANSACTIONAL_ID");
        assert_eq!(name_of(&RESOURCE_TYPES, 2, 0), "unknown(0)");
    }

    #[test]
    fn one_resource_at_most() {
        let none = AclResource::default();
        assert_eq!(resource(&none).ok(), Some(None));
        let two = AclResource {
            topic: Some("t".into()),
            cluster: true,
            ..AclResource::default()
        };
        assert!(resource(&two).is_err());
        let topic = AclResource {
            topic: Some("t".into()),
            ..AclResource::default()
        };
        assert_eq!(resource(&topic).ok(), Some(Some((2, "t".to_string()))));
    }
}
