//! `strandctl quota`: client quotas (the `kafka-configs.sh --entity-type users|clients`
//! quota part; DescribeClientQuotas, AlterClientQuotas). An entity is a user and/or a
//! client id, each named (`--user`, `--client-id`) or the default (`--default-user`,
//! `--default-client-id`).
//!
//! Invariant: `set` sends only positive rates and names at least one entity part; nothing
//! is sent for a refused command line.

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use kafka_protocol::protocol::StrBytes;

use crate::cli::{QuotaCmd, QuotaEntityArgs};
use crate::kafka::{check_code, KafkaClient};
use crate::output::Table;
use crate::Refused;

const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;

/// The entity's (type, name) parts; `None` names the default.
fn parts(e: &QuotaEntityArgs) -> Result<Vec<(&'static str, Option<String>)>, Refused> {
    let mut out = Vec::new();
    match (&e.user, e.default_user) {
        (Some(_), true) => return Err(Refused("--user or --default-user, not both".into())),
        (Some(u), false) => out.push(("user", Some(u.clone()))),
        (None, true) => out.push(("user", None)),
        (None, false) => {}
    }
    match (&e.client_id, e.default_client_id) {
        (Some(_), true) => {
            return Err(Refused(
                "--client-id or --default-client-id, not both".into(),
            ))
        }
        (Some(c), false) => out.push(("client-id", Some(c.clone()))),
        (None, true) => out.push(("client-id", None)),
        (None, false) => {}
    }
    Ok(out)
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Runs a `quota` subcommand and returns what to print.
pub fn run(client: &mut KafkaClient, cmd: &QuotaCmd) -> anyhow::Result<String> {
    match cmd {
        QuotaCmd::List { entity } => list(client, &parts(entity)?),
        QuotaCmd::Set {
            entity,
            producer_byte_rate,
            consumer_byte_rate,
            request_percentage,
        } => {
            let mut ops = Vec::new();
            for (key, v) in [
                ("producer_byte_rate", producer_byte_rate),
                ("consumer_byte_rate", consumer_byte_rate),
                ("request_percentage", request_percentage),
            ] {
                if let Some(v) = v {
                    if *v == 0 {
                        return Err(Refused(format!("{key} must be positive")).into());
                    }
                    ops.push(OpData::default().with_key(s(key)).with_value(*v as f64));
                }
            }
            if ops.is_empty() {
                return Err(Refused(
                    "give --producer-byte-rate, --consumer-byte-rate and/or --request-percentage"
                        .into(),
                )
                .into());
            }
            alter(client, &parts(entity)?, ops)?;
            Ok("quota set\n".into())
        }
        QuotaCmd::Remove { entity, key } => {
            let ops = key
                .iter()
                .map(|k| OpData::default().with_key(s(k)).with_remove(true))
                .collect();
            alter(client, &parts(entity)?, ops)?;
            Ok("quota removed\n".into())
        }
    }
}

fn alter(
    client: &mut KafkaClient,
    parts: &[(&'static str, Option<String>)],
    ops: Vec<OpData>,
) -> anyhow::Result<()> {
    if parts.is_empty() {
        return Err(Refused(
            "name the entity: --user/--default-user and/or --client-id/--default-client-id".into(),
        )
        .into());
    }
    let entity = parts
        .iter()
        .map(|(t, n)| {
            EntityData::default()
                .with_entity_type(s(t))
                .with_entity_name(n.as_deref().map(s))
        })
        .collect();
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default().with_entity(entity).with_ops(ops)]);
    let resp = client.send(&req)?;
    for e in &resp.entries {
        check_code(
            e.error_code,
            "change a client quota",
            e.error_message.as_ref(),
        )?;
    }
    Ok(())
}

fn list(
    client: &mut KafkaClient,
    parts: &[(&'static str, Option<String>)],
) -> anyhow::Result<String> {
    let components = parts
        .iter()
        .map(|(t, n)| {
            ComponentData::default()
                .with_entity_type(s(t))
                .with_match_type(if n.is_some() {
                    MATCH_EXACT
                } else {
                    MATCH_DEFAULT
                })
                .with_match(n.as_deref().map(s))
        })
        .collect();
    let resp = client.send(&DescribeClientQuotasRequest::default().with_components(components))?;
    check_code(
        resp.error_code,
        "describe client quotas",
        resp.error_message.as_ref(),
    )?;
    let mut t = Table::new(&["USER", "CLIENT_ID", "QUOTA", "VALUE"]);
    for e in resp.entries.iter().flatten() {
        let name = |kind: &str| {
            e.entity
                .iter()
                .find(|p| p.entity_type.as_str() == kind)
                .map_or_else(String::new, |p| {
                    p.entity_name
                        .as_ref()
                        .map_or_else(|| "<default>".to_string(), ToString::to_string)
                })
        };
        for v in &e.values {
            t.row(vec![
                name("user"),
                name("client-id"),
                v.key.to_string(),
                format!("{}", v.value),
            ]);
        }
    }
    Ok(t.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities_name_each_part_once() {
        let e = QuotaEntityArgs {
            user: Some("alice".into()),
            default_client_id: true,
            ..QuotaEntityArgs::default()
        };
        assert_eq!(
            parts(&e).ok(),
            Some(vec![("user", Some("alice".into())), ("client-id", None)])
        );
        let both = QuotaEntityArgs {
            user: Some("alice".into()),
            default_user: true,
            ..QuotaEntityArgs::default()
        };
        assert!(parts(&both).is_err());
    }
}
