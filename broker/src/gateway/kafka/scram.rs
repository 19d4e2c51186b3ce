//! SCRAM credential administration (KIP-554): AlterUserScramCredentials and
//! DescribeUserScramCredentials, as Kafka's controller answers them. The credentials are
//! controller commands (`UpsertScramCredential`, `DeleteScramCredential`), so every node
//! has them; a client sends a salted password, never the password, and gets back
//! mechanisms and iteration counts, never a key.
//!
//! Invariant: one result per user; a user whose changes are not all acceptable gets the
//! first error and none of its changes is made.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::{Command, MetaError, ScramEntry};
use crate::common::errors::code;
use crate::security::acl::op;
use crate::security::scram::{Credential, Mechanism};

/// DUPLICATE_RESOURCE.
const DUPLICATE_RESOURCE: i16 = 92;
/// RESOURCE_NOT_FOUND.
const RESOURCE_NOT_FOUND: i16 = 91;
/// UNSUPPORTED_SASL_MECHANISM.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// One user's commands, or its first error.
type UserChanges = Result<Vec<Command>, (i16, String)>;

/// AlterUserScramCredentials (v0).
pub async fn alter(
    shard: &Rc<crate::shard::Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: AlterUserScramCredentialsRequest = ctx.decode(body)?;
    let (order, mut per_user) = changes_by_user(&r);
    if !ctx.allowed_on_cluster(shard, op::ALTER) {
        for changes in per_user.values_mut() {
            *changes = Err((
                code::CLUSTER_AUTHORIZATION_FAILED,
                "not authorized on the cluster".into(),
            ));
        }
    }
    let mut results = Vec::with_capacity(order.len());
    for user in order {
        let outcome = match per_user.remove(&user) {
            Some(Ok(cmds)) => commit_user(shard, cmds).await,
            Some(Err(e)) => Err(e),
            None => Ok(()),
        };
        let (error_code, message) = match outcome {
            Ok(()) => (code::NONE, None),
            Err((c, m)) => (c, Some(s(m))),
        };
        results.push(
            AlterUserScramCredentialsResult::default()
                .with_user(s(user))
                .with_error_code(error_code)
                .with_error_message(message),
        );
    }
    ctx.respond(&AlterUserScramCredentialsResponse::default().with_results(results))
}

/// The request's changes per user (users in the order first named): their commands, or
/// the first error (an unknown mechanism, a user's credential changed twice).
fn changes_by_user(
    r: &AlterUserScramCredentialsRequest,
) -> (Vec<String>, BTreeMap<String, UserChanges>) {
    // Per user, in the order first named: its commands, or its first error.
    let mut per_user: BTreeMap<String, UserChanges> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut seen: BTreeSet<(String, i8)> = BTreeSet::new();
    let mut add = |user: String, mechanism: i8, cmd: Result<Command, (i16, String)>| {
        if !per_user.contains_key(&user) {
            order.push(user.clone());
        }
        let entry = per_user
            .entry(user.clone())
            .or_insert_with(|| Ok(Vec::new()));
        let cmd = if seen.insert((user.clone(), mechanism)) {
            cmd
        } else {
            Err((
                DUPLICATE_RESOURCE,
                format!("a credential of user {user} is altered twice in one request"),
            ))
        };
        match (entry.as_mut(), cmd) {
            (Ok(cmds), Ok(c)) => cmds.push(c),
            (Ok(_), Err(e)) => *entry = Err(e),
            (Err(_), _) => {}
        }
    };
    for d in &r.deletions {
        let user = d.name.to_string();
        let cmd = match Mechanism::from_kafka_type(d.mechanism) {
            Some(_) => Ok(Command::DeleteScramCredential {
                user: user.clone(),
                mechanism: d.mechanism,
            }),
            None => Err(unsupported(d.mechanism)),
        };
        add(user, d.mechanism, cmd);
    }
    for u in &r.upsertions {
        let user = u.name.to_string();
        let cmd = match Mechanism::from_kafka_type(u.mechanism) {
            Some(m) => {
                let iterations = u32::try_from(u.iterations).unwrap_or(0);
                let c =
                    Credential::from_salted_password(m, &u.salted_password, &u.salt, iterations);
                Ok(Command::UpsertScramCredential {
                    user: user.clone(),
                    mechanism: u.mechanism,
                    credential: ScramEntry {
                        salt: c.salt,
                        iterations: u.iterations,
                        stored_key: c.stored_key,
                        server_key: c.server_key,
                    },
                })
            }
            None => Err(unsupported(u.mechanism)),
        };
        add(user, u.mechanism, cmd);
    }
    (order, per_user)
}

fn unsupported(mechanism: i8) -> (i16, String) {
    (
        UNSUPPORTED_SASL_MECHANISM,
        format!("unknown SCRAM mechanism type {mechanism} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"),
    )
}

/// Checks all of one user's commands against the metadata first (so that none is made
/// when one is refused), then commits them.
async fn commit_user(
    shard: &Rc<crate::shard::Shard>,
    cmds: Vec<Command>,
) -> Result<(), (i16, String)> {
    let mut trial = (*shard.metadata()).clone();
    for c in &cmds {
        trial
            .apply(c)
            .map_err(|e| (e.kafka_code(), e.to_string()))?;
    }
    for r in super::topics::commit(shard, cmds).await {
        r.map_err(|e: MetaError| (e.kafka_code(), e.to_string()))?;
    }
    Ok(())
}

/// DescribeUserScramCredentials (v0): the mechanisms and iterations of the users named
/// (every user with a credential when none is).
pub async fn describe(
    shard: &Rc<crate::shard::Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: DescribeUserScramCredentialsRequest = ctx.decode(body)?;
    if !ctx.allowed_on_cluster(shard, op::DESCRIBE) {
        return ctx.respond(
            &DescribeUserScramCredentialsResponse::default()
                .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(Some(s("not authorized on the cluster"))),
        );
    }
    let meta = shard.metadata();
    let named: Vec<String> = r
        .users
        .iter()
        .flatten()
        .map(|u| u.name.to_string())
        .collect();
    let users: Vec<String> = if named.is_empty() {
        meta.scram.keys().cloned().collect()
    } else {
        named.clone()
    };
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for u in &named {
        *counts.entry(u.as_str()).or_default() += 1;
    }
    let mut reported = BTreeSet::new();
    let mut results = Vec::with_capacity(users.len());
    for user in &users {
        if !reported.insert(user.clone()) {
            continue;
        }
        let base = DescribeUserScramCredentialsResult::default().with_user(s(user.clone()));
        if counts.get(user.as_str()).copied().unwrap_or(0) > 1 {
            results.push(
                base.with_error_code(DUPLICATE_RESOURCE)
                    .with_error_message(Some(s(format!("user {user} is named twice")))),
            );
            continue;
        }
        match meta.scram.get(user) {
            Some(creds) => {
                let infos = creds
                    .iter()
                    .map(|(m, c)| {
                        CredentialInfo::default()
                            .with_mechanism(*m)
                            .with_iterations(c.iterations)
                    })
                    .collect();
                results.push(base.with_credential_infos(infos));
            }
            None => results.push(base.with_error_code(RESOURCE_NOT_FOUND).with_error_message(
                Some(s(format!(
                    "attempt to describe a user credential that does not exist: {user}"
                ))),
            )),
        }
    }
    ctx.respond(&DescribeUserScramCredentialsResponse::default().with_results(results))
}
