//! ACL administration (CreateAcls, DescribeAcls, DeleteAcls v1–3) as Kafka's controller
//! answers it, and the checks every handler makes (`Ctx::allowed`). ACLs are controller
//! commands (`CreateAcls`, `DeleteAcls`), so every node and shard authorizes with the same
//! set; without `authorizer_enabled` the three APIs answer SECURITY_DISABLED and every
//! check passes, as a Kafka broker without an authorizer.
//!
//! Invariant: CreateAcls needs ALTER on the cluster, DescribeAcls DESCRIBE, DeleteAcls
//! ALTER; an ACL Kafka would refuse gets INVALID_REQUEST and is not stored.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::{Command, MetaError};
use crate::common::errors::code;
use crate::security::acl::{self, op, resource, AclBinding, AclFilter, Policy};
use crate::shard::Shard;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

impl Ctx {
    /// The client's IP address as ACL hosts name it (`client_host` without its `/`).
    fn client_ip(&self) -> &str {
        self.client_host.trim_start_matches('/')
    }

    /// Whether this connection's principal may do `operation` on the resource `name` of
    /// `resource_type` (always, without `authorizer_enabled`).
    pub fn allowed(&self, shard: &Shard, operation: i8, resource_type: i8, name: &str) -> bool {
        self.authorized(shard, |acls, policy, who, ip| {
            acl::authorize(acls, policy, who, ip, operation, resource_type, name)
        })
    }

    /// `allowed` on the cluster resource.
    pub fn allowed_on_cluster(&self, shard: &Shard, operation: i8) -> bool {
        self.allowed(shard, operation, resource::CLUSTER, acl::CLUSTER_NAME)
    }

    /// Whether the principal may do `operation` on some resource of `resource_type`.
    pub fn allowed_on_any(&self, shard: &Shard, operation: i8, resource_type: i8) -> bool {
        self.authorized(shard, |acls, policy, who, ip| {
            acl::authorize_any(acls, policy, who, ip, operation, resource_type)
        })
    }

    /// `check` over the ACLs, the policy, the principal and its address; true without
    /// `authorizer_enabled`.
    fn authorized(
        &self,
        shard: &Shard,
        check: impl FnOnce(&std::collections::BTreeSet<AclBinding>, &Policy<'_>, &str, &str) -> bool,
    ) -> bool {
        let c = &shard.config;
        if !c.authorizer_enabled {
            return true;
        }
        let policy = Policy {
            super_users: &c.super_users,
            allow_everyone_if_no_acl_found: c.allow_everyone_if_no_acl_found,
        };
        check(
            &shard.metadata().acls,
            &policy,
            &self.principal,
            self.client_ip(),
        )
    }
}

/// What a refused or disabled ACL request answers: its code and message, if refused.
fn refusal(shard: &Shard, ctx: &Ctx, operation: i8) -> Option<(i16, String)> {
    if !shard.config.authorizer_enabled {
        return Some((
            code::SECURITY_DISABLED,
            "no authorizer is configured (authorizer_enabled)".into(),
        ));
    }
    (!ctx.allowed_on_cluster(shard, operation)).then(|| {
        (
            code::CLUSTER_AUTHORIZATION_FAILED,
            "not authorized on the cluster".into(),
        )
    })
}

/// CreateAcls.
pub async fn create(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: CreateAclsRequest = ctx.decode(body)?;
    let result = |code: i16, message: Option<String>| {
        AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
    };
    if let Some((c, m)) = refusal(shard, ctx, op::ALTER) {
        let results = r
            .creations
            .iter()
            .map(|_| result(c, Some(m.clone())))
            .collect();
        return ctx.respond(&CreateAclsResponse::default().with_results(results));
    }
    let bindings: Vec<AclBinding> = r
        .creations
        .iter()
        .map(|c| AclBinding {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission: c.permission_type,
        })
        .collect();
    let mut results = Vec::with_capacity(bindings.len());
    let valid: Vec<AclBinding> = bindings
        .iter()
        .filter(|b| b.validate().is_ok())
        .cloned()
        .collect();
    let committed = if valid.is_empty() {
        Ok(())
    } else {
        let cmd = Command::CreateAcls { acls: valid };
        super::topics::commit(shard, vec![cmd])
            .await
            .into_iter()
            .next()
            .unwrap_or(Ok(()))
    };
    for b in &bindings {
        results.push(match (b.validate(), &committed) {
            (Err(why), _) => result(code::INVALID_REQUEST, Some(why)),
            (Ok(()), Err(e)) => result(e.kafka_code(), Some(e.to_string())),
            (Ok(()), Ok(())) => result(code::NONE, None),
        });
    }
    ctx.respond(&CreateAclsResponse::default().with_results(results))
}

/// DescribeAcls.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DescribeAclsRequest = ctx.decode(body)?;
    let filter = AclFilter {
        resource_type: r.resource_type_filter,
        resource_name: r.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_ref().map(|n| n.to_string()),
        host: r.host_filter.as_ref().map(|n| n.to_string()),
        operation: r.operation,
        permission: r.permission_type,
    };
    let refused = refusal(shard, ctx, op::DESCRIBE).or_else(|| {
        filter
            .validate()
            .err()
            .map(|why| (code::INVALID_REQUEST, why))
    });
    if let Some((c, m)) = refused {
        return ctx.respond(
            &DescribeAclsResponse::default()
                .with_error_code(c)
                .with_error_message(Some(s(m))),
        );
    }
    let meta = shard.metadata();
    let mut by_resource: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for a in meta.acls.iter().filter(|a| filter.matches(a)) {
        by_resource
            .entry((a.resource_type, a.resource_name.as_str(), a.pattern_type))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(s(a.principal.clone()))
                    .with_host(s(a.host.clone()))
                    .with_operation(a.operation)
                    .with_permission_type(a.permission),
            );
    }
    let resources = by_resource
        .into_iter()
        .map(|((rt, name, pt), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(rt)
                .with_resource_name(s(name))
                .with_pattern_type(pt)
                .with_acls(acls)
        })
        .collect();
    ctx.respond(&DescribeAclsResponse::default().with_resources(resources))
}

/// DeleteAcls: each filter's matches, as they were when asked, are removed in one command.
pub async fn delete(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DeleteAclsRequest = ctx.decode(body)?;
    let failed = |c: i16, m: String| {
        DeleteAclsFilterResult::default()
            .with_error_code(c)
            .with_error_message(Some(s(m)))
    };
    if let Some((c, m)) = refusal(shard, ctx, op::ALTER) {
        let results = r.filters.iter().map(|_| failed(c, m.clone())).collect();
        return ctx.respond(&DeleteAclsResponse::default().with_filter_results(results));
    }
    let meta = shard.metadata();
    let matched: Vec<Result<Vec<AclBinding>, String>> = r
        .filters
        .iter()
        .map(|f| {
            let filter = AclFilter {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref().map(|n| n.to_string()),
                host: f.host_filter.as_ref().map(|n| n.to_string()),
                operation: f.operation,
                permission: f.permission_type,
            };
            filter.validate()?;
            Ok(meta
                .acls
                .iter()
                .filter(|a| filter.matches(a))
                .cloned()
                .collect())
        })
        .collect();
    let mut doomed: Vec<AclBinding> = matched.iter().flatten().flatten().cloned().collect();
    doomed.sort();
    doomed.dedup();
    let committed: Result<(), MetaError> = if doomed.is_empty() {
        Ok(())
    } else {
        let cmd = Command::DeleteAcls { acls: doomed };
        super::topics::commit(shard, vec![cmd])
            .await
            .into_iter()
            .next()
            .unwrap_or(Ok(()))
    };
    let results = matched
        .into_iter()
        .map(|m| match (m, &committed) {
            (Err(why), _) => failed(code::INVALID_REQUEST, why),
            (Ok(_), Err(e)) => failed(e.kafka_code(), e.to_string()),
            (Ok(acls), Ok(())) => DeleteAclsFilterResult::default().with_matching_acls(
                acls.into_iter()
                    .map(|a| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(a.resource_type)
                            .with_resource_name(s(a.resource_name))
                            .with_pattern_type(a.pattern_type)
                            .with_principal(s(a.principal))
                            .with_host(s(a.host))
                            .with_operation(a.operation)
                            .with_permission_type(a.permission)
                    })
                    .collect(),
            ),
        })
        .collect();
    ctx.respond(&DeleteAclsResponse::default().with_filter_results(results))
}
