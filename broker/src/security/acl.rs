//! ACLs and the authorizer (issue 23), with Kafka's semantics (StandardAuthorizer,
//! KIP-290 prefixed patterns): an ACL is (resource type, name, LITERAL or PREFIXED
//! pattern; principal, host, operation, ALLOW or DENY). A request is authorized when the
//! principal is a super user, or no DENY matches and an ALLOW does; an ALLOW of READ,
//! WRITE, DELETE or ALTER also allows DESCRIBE, and one of ALTER_CONFIGS allows
//! DESCRIBE_CONFIGS. A resource no ACL names at all is allowed only with
//! `allow_everyone_if_no_acl_found`.
//!
//! Invariant: DENY wins over ALLOW; nothing here allocates per check beyond the result, and
//! the codes are Kafka's wire codes (checked by `AclBinding::validate` before an ACL is
//! stored).

use std::collections::BTreeSet;

/// Kafka's resource type codes.
pub mod resource {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// A topic.
    pub const TOPIC: i8 = 2;
    /// A consumer group.
    pub const GROUP: i8 = 3;
    /// The cluster (name `kafka-cluster`).
    pub const CLUSTER: i8 = 4;
    /// A transactional id.
    pub const TRANSACTIONAL_ID: i8 = 5;
    /// A delegation token (stored, never checked: Strand has no delegation tokens).
    pub const DELEGATION_TOKEN: i8 = 6;
    /// A user (stored, never checked).
    pub const USER: i8 = 7;
}

/// Kafka's pattern type codes.
pub mod pattern {
    /// ANY (filters only): any pattern type, the exact name.
    pub const ANY: i8 = 1;
    /// MATCH (filters only): every ACL that applies to the name.
    pub const MATCH: i8 = 2;
    /// The name itself (or `*`, every name).
    pub const LITERAL: i8 = 3;
    /// Every name starting with it.
    pub const PREFIXED: i8 = 4;
}

/// Kafka's operation codes.
pub mod op {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// Every operation.
    pub const ALL: i8 = 2;
    /// READ.
    pub const READ: i8 = 3;
    /// WRITE.
    pub const WRITE: i8 = 4;
    /// CREATE.
    pub const CREATE: i8 = 5;
    /// DELETE.
    pub const DELETE: i8 = 6;
    /// ALTER.
    pub const ALTER: i8 = 7;
    /// DESCRIBE.
    pub const DESCRIBE: i8 = 8;
    /// CLUSTER_ACTION.
    pub const CLUSTER_ACTION: i8 = 9;
    /// DESCRIBE_CONFIGS.
    pub const DESCRIBE_CONFIGS: i8 = 10;
    /// ALTER_CONFIGS.
    pub const ALTER_CONFIGS: i8 = 11;
    /// IDEMPOTENT_WRITE.
    pub const IDEMPOTENT_WRITE: i8 = 12;
    /// CREATE_TOKENS.
    pub const CREATE_TOKENS: i8 = 13;
    /// DESCRIBE_TOKENS.
    pub const DESCRIBE_TOKENS: i8 = 14;
}

/// Kafka's permission type codes.
pub mod permission {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// DENY.
    pub const DENY: i8 = 2;
    /// ALLOW.
    pub const ALLOW: i8 = 3;
}

/// The literal name matching every resource of its type.
pub const WILDCARD: &str = "*";
/// The cluster resource's name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The principal matching every principal.
pub const ANY_PRINCIPAL: &str = "User:*";

/// One ACL.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct AclBinding {
    /// `resource::*`.
    pub resource_type: i8,
    /// The resource's name, prefix or `*`.
    pub resource_name: String,
    /// `pattern::LITERAL` or `pattern::PREFIXED`.
    pub pattern_type: i8,
    /// `Type:name` (`User:alice`, `User:*`).
    pub principal: String,
    /// A client IP address or `*`.
    pub host: String,
    /// `op::*` (not ANY).
    pub operation: i8,
    /// `permission::ALLOW` or `permission::DENY`.
    pub permission: i8,
}

impl AclBinding {
    /// Why Kafka would refuse to create it (INVALID_REQUEST), if it would.
    pub fn validate(&self) -> Result<(), String> {
        let known_type = (resource::TOPIC..=resource::USER).contains(&self.resource_type);
        if !known_type {
            return Err(format!("invalid resource type {}", self.resource_type));
        }
        if self.pattern_type != pattern::LITERAL && self.pattern_type != pattern::PREFIXED {
            return Err(format!(
                "invalid pattern type {} (LITERAL or PREFIXED)",
                self.pattern_type
            ));
        }
        if self.resource_name.is_empty() {
            return Err("the resource name is empty".into());
        }
        if self.resource_type == resource::CLUSTER && self.resource_name != CLUSTER_NAME {
            return Err(format!("the cluster resource is named {CLUSTER_NAME}"));
        }
        if !(op::ALL..=op::DESCRIBE_TOKENS).contains(&self.operation) {
            return Err(format!("invalid operation {}", self.operation));
        }
        if self.permission != permission::ALLOW && self.permission != permission::DENY {
            return Err(format!("invalid permission type {}", self.permission));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Err(format!("principal '{}' is not Type:name", self.principal)),
        }
        if self.host.is_empty() {
            return Err("the host is empty (a client IP address or *)".into());
        }
        Ok(())
    }

    /// Whether its resource pattern applies to the resource `name` of its type.
    fn applies_to(&self, name: &str) -> bool {
        match self.pattern_type {
            pattern::LITERAL => self.resource_name == name || self.resource_name == WILDCARD,
            pattern::PREFIXED => name.starts_with(&self.resource_name),
            _ => false,
        }
    }
}

/// A DescribeAcls or DeleteAcls filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFilter {
    /// `resource::ANY` or a type.
    pub resource_type: i8,
    /// `None`: any name.
    pub resource_name: Option<String>,
    /// `pattern::ANY`, `MATCH`, `LITERAL` or `PREFIXED`.
    pub pattern_type: i8,
    /// `None`: any principal.
    pub principal: Option<String>,
    /// `None`: any host.
    pub host: Option<String>,
    /// `op::ANY` or an operation.
    pub operation: i8,
    /// `permission::ANY` or a permission.
    pub permission: i8,
}

impl AclFilter {
    /// Why Kafka would refuse the filter (INVALID_REQUEST), if it would.
    pub fn validate(&self) -> Result<(), String> {
        if !(resource::ANY..=resource::USER).contains(&self.resource_type) {
            return Err(format!("invalid resource type {}", self.resource_type));
        }
        if !(pattern::ANY..=pattern::PREFIXED).contains(&self.pattern_type) {
            return Err(format!("invalid pattern type {}", self.pattern_type));
        }
        if !(op::ANY..=op::DESCRIBE_TOKENS).contains(&self.operation) {
            return Err(format!("invalid operation {}", self.operation));
        }
        if !(permission::ANY..=permission::ALLOW).contains(&self.permission) {
            return Err(format!("invalid permission type {}", self.permission));
        }
        Ok(())
    }

    /// Whether `acl` matches (Kafka's ResourcePatternFilter and AccessControlEntryFilter).
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let any_or = |want: i8, any: i8, have: i8| want == any || want == have;
        let entry = self.principal.as_deref().is_none_or(|p| p == acl.principal)
            && self.host.as_deref().is_none_or(|h| h == acl.host)
            && any_or(self.operation, op::ANY, acl.operation)
            && any_or(self.permission, permission::ANY, acl.permission);
        entry
            && any_or(self.resource_type, resource::ANY, acl.resource_type)
            && self.matches_pattern(acl)
    }

    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        let p = self.pattern_type;
        if p != pattern::ANY && p != pattern::MATCH && p != acl.pattern_type {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if p == pattern::ANY || p == acl.pattern_type {
            return *name == acl.resource_name;
        }
        acl.applies_to(name)
    }
}

/// What the authorizer knows besides the ACLs: `super_users` and
/// `allow_everyone_if_no_acl_found`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Policy<'a> {
    /// Principals allowed everything.
    pub super_users: &'a [String],
    /// Allow a resource no ACL names.
    pub allow_everyone_if_no_acl_found: bool,
}

/// Whether `operation` is implied by an ALLOW of `allowed`.
fn implied_by(operation: i8, allowed: i8) -> bool {
    allowed == operation
        || allowed == op::ALL
        || (operation == op::DESCRIBE
            && [op::READ, op::WRITE, op::DELETE, op::ALTER].contains(&allowed))
        || (operation == op::DESCRIBE_CONFIGS && allowed == op::ALTER_CONFIGS)
}

/// Whether `principal` from `host` may do `operation` on the resource `name` of type
/// `resource_type`, under `acls` and `policy`.
pub fn authorize(
    acls: &BTreeSet<AclBinding>,
    policy: &Policy<'_>,
    principal: &str,
    host: &str,
    operation: i8,
    resource_type: i8,
    name: &str,
) -> bool {
    if policy.super_users.iter().any(|s| s == principal) {
        return true;
    }
    let mut any_acl = false;
    let mut allowed = false;
    for acl in acls
        .iter()
        .filter(|a| a.resource_type == resource_type && a.applies_to(name))
    {
        any_acl = true;
        let who = acl.principal == principal || acl.principal == ANY_PRINCIPAL;
        let from = acl.host == host || acl.host == WILDCARD;
        if !who || !from {
            continue;
        }
        match acl.permission {
            permission::DENY if acl.operation == operation || acl.operation == op::ALL => {
                return false;
            }
            permission::ALLOW if implied_by(operation, acl.operation) => allowed = true,
            _ => {}
        }
    }
    allowed || (!any_acl && policy.allow_everyone_if_no_acl_found)
}

/// Whether `principal` may do `operation` on at least one resource of `resource_type`
/// (Kafka's `authorizeByResourceType`: an ALLOW on any pattern not cancelled by a DENY of
/// the same or a wider pattern; used by InitProducerId without a transactional id).
pub fn authorize_any(
    acls: &BTreeSet<AclBinding>,
    policy: &Policy<'_>,
    principal: &str,
    host: &str,
    operation: i8,
    resource_type: i8,
) -> bool {
    if policy.super_users.iter().any(|s| s == principal) {
        return true;
    }
    let relevant = |a: &&AclBinding| {
        a.resource_type == resource_type
            && (a.principal == principal || a.principal == ANY_PRINCIPAL)
            && (a.host == host || a.host == WILDCARD)
    };
    let denied = |name: &str| {
        acls.iter().filter(relevant).any(|d| {
            d.permission == permission::DENY
                && (d.operation == operation || d.operation == op::ALL)
                && d.applies_to(name)
        })
    };
    acls.iter().filter(relevant).any(|a| {
        a.permission == permission::ALLOW
            && implied_by(operation, a.operation)
            && !denied(&a.resource_name)
    }) || (policy.allow_everyone_if_no_acl_found
        && !acls.iter().any(|a| a.resource_type == resource_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: i8, name: &str, pt: i8, who: &str, host: &str, o: i8, perm: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: who.into(),
            host: host.into(),
            operation: o,
            permission: perm,
        }
    }

    fn allow_read(name: &str, pt: i8, who: &str) -> AclBinding {
        acl(
            resource::TOPIC,
            name,
            pt,
            who,
            "*",
            op::READ,
            permission::ALLOW,
        )
    }

    fn can(acls: &[AclBinding], who: &str, o: i8, topic: &str) -> bool {
        let set: BTreeSet<AclBinding> = acls.iter().cloned().collect();
        authorize(
            &set,
            &Policy::default(),
            who,
            "10.0.0.1",
            o,
            resource::TOPIC,
            topic,
        )
    }

    #[test]
    fn literal_prefixed_and_wildcard_patterns_apply_as_kafkas() {
        let acls = [
            allow_read("orders", pattern::LITERAL, "User:alice"),
            allow_read("logs-", pattern::PREFIXED, "User:bob"),
            allow_read("*", pattern::LITERAL, "User:carol"),
        ];
        assert!(can(&acls, "User:alice", op::READ, "orders"));
        assert!(!can(&acls, "User:alice", op::READ, "orders2"));
        assert!(can(&acls, "User:bob", op::READ, "logs-app"));
        assert!(!can(&acls, "User:bob", op::READ, "log"));
        assert!(can(&acls, "User:carol", op::READ, "anything"));
        assert!(!can(&acls, "User:dave", op::READ, "orders"));
    }

    #[test]
    fn deny_wins_and_all_covers_every_operation() {
        let acls = [
            acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:*",
                "*",
                op::ALL,
                permission::ALLOW,
            ),
            acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:eve",
                "*",
                op::WRITE,
                permission::DENY,
            ),
        ];
        assert!(can(&acls, "User:eve", op::READ, "t"));
        assert!(!can(&acls, "User:eve", op::WRITE, "t"));
        assert!(can(&acls, "User:frank", op::WRITE, "t"));
        let deny_all = [
            allow_read("t", pattern::LITERAL, "User:eve"),
            acl(
                resource::TOPIC,
                "",
                pattern::PREFIXED,
                "User:eve",
                "*",
                op::ALL,
                permission::DENY,
            ),
        ];
        assert!(!can(&deny_all, "User:eve", op::READ, "t"));
    }

    #[test]
    fn describe_is_implied_by_read_write_delete_alter_and_describe_configs_by_alter_configs() {
        for o in [op::READ, op::WRITE, op::DELETE, op::ALTER] {
            let acls = [acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:a",
                "*",
                o,
                permission::ALLOW,
            )];
            assert!(can(&acls, "User:a", op::DESCRIBE, "t"), "{o}");
            assert!(!can(&acls, "User:a", op::CREATE, "t"), "{o}");
        }
        let acls = [acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:a",
            "*",
            op::ALTER_CONFIGS,
            permission::ALLOW,
        )];
        assert!(can(&acls, "User:a", op::DESCRIBE_CONFIGS, "t"));
        // A DENY of READ does not deny DESCRIBE.
        let acls = [
            acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:a",
                "*",
                op::DESCRIBE,
                permission::ALLOW,
            ),
            acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:a",
                "*",
                op::READ,
                permission::DENY,
            ),
        ];
        assert!(can(&acls, "User:a", op::DESCRIBE, "t"));
    }

    #[test]
    fn hosts_super_users_and_the_no_acl_default() {
        let acls: BTreeSet<AclBinding> = [acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:a",
            "10.0.0.9",
            op::READ,
            permission::ALLOW,
        )]
        .into();
        let policy = Policy::default();
        let check = |p: &Policy, who: &str, host: &str, name: &str| {
            authorize(&acls, p, who, host, op::READ, resource::TOPIC, name)
        };
        assert!(check(&policy, "User:a", "10.0.0.9", "t"));
        assert!(!check(&policy, "User:a", "10.0.0.1", "t"));
        assert!(
            !check(&policy, "User:a", "10.0.0.9", "other"),
            "no ACL: denied by default"
        );
        let open = Policy {
            allow_everyone_if_no_acl_found: true,
            ..Policy::default()
        };
        assert!(
            check(&open, "User:z", "1.1.1.1", "other"),
            "no ACL names it: allowed"
        );
        assert!(
            !check(&open, "User:z", "1.1.1.1", "t"),
            "an ACL names it: not allowed"
        );
        let supers = ["User:root".to_string()];
        let root = Policy {
            super_users: &supers,
            ..Policy::default()
        };
        assert!(check(&root, "User:root", "1.1.1.1", "t"));
    }

    #[test]
    fn filters_match_as_kafkas_resource_pattern_filter() {
        let lit = allow_read("orders", pattern::LITERAL, "User:a");
        let pre = allow_read("ord", pattern::PREFIXED, "User:a");
        let wild = allow_read("*", pattern::LITERAL, "User:b");
        let f = |pt: i8, name: Option<&str>| AclFilter {
            resource_type: resource::ANY,
            resource_name: name.map(str::to_string),
            pattern_type: pt,
            principal: None,
            host: None,
            operation: op::ANY,
            permission: permission::ANY,
        };
        let all = [&lit, &pre, &wild];
        let hits = |flt: &AclFilter| all.iter().filter(|a| flt.matches(a)).count();
        assert_eq!(hits(&f(pattern::ANY, None)), 3);
        assert_eq!(hits(&f(pattern::ANY, Some("orders"))), 1);
        assert_eq!(hits(&f(pattern::MATCH, Some("orders"))), 3);
        assert_eq!(hits(&f(pattern::LITERAL, Some("orders"))), 1);
        assert_eq!(hits(&f(pattern::PREFIXED, None)), 1);
        let mut by_who = f(pattern::ANY, None);
        by_who.principal = Some("User:b".into());
        assert_eq!(hits(&by_who), 1);
    }

    #[test]
    fn bad_acls_are_refused() {
        let good = allow_read("t", pattern::LITERAL, "User:a");
        assert!(good.validate().is_ok());
        let bad = [
            AclBinding {
                resource_type: resource::ANY,
                ..good.clone()
            },
            AclBinding {
                pattern_type: pattern::MATCH,
                ..good.clone()
            },
            AclBinding {
                operation: op::ANY,
                ..good.clone()
            },
            AclBinding {
                permission: permission::ANY,
                ..good.clone()
            },
            AclBinding {
                principal: "alice".into(),
                ..good.clone()
            },
            AclBinding {
                host: String::new(),
                ..good.clone()
            },
            AclBinding {
                resource_type: resource::CLUSTER,
                resource_name: "c".into(),
                ..good.clone()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
    }

    #[test]
    fn any_resource_of_a_type_for_idempotent_producers() {
        let policy = Policy::default();
        let set = |a: &[AclBinding]| a.iter().cloned().collect::<BTreeSet<_>>();
        let write = |pt: i8, name: &str, perm: i8| {
            acl(resource::TOPIC, name, pt, "User:a", "*", op::WRITE, perm)
        };
        let any = |acls: &BTreeSet<AclBinding>| {
            authorize_any(acls, &policy, "User:a", "h", op::WRITE, resource::TOPIC)
        };
        assert!(any(&set(&[write(
            pattern::LITERAL,
            "t",
            permission::ALLOW
        )])));
        assert!(!any(&set(&[])));
        assert!(!any(&set(&[
            write(pattern::LITERAL, "t", permission::ALLOW),
            write(pattern::LITERAL, "*", permission::DENY),
        ])));
    }
}
