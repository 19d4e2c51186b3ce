//! Client quotas on the wire: DescribeClientQuotas and AlterClientQuotas (v0–1, KIP-546)
//! as Kafka's controller answers them, and their enforcement: a Produce's size counts
//! against `producer_byte_rate` as it is read (`record_produce`), a Fetch's answered bytes
//! against `consumer_byte_rate` (`record`), and the shard time each request's handler
//! took against `request_percentage` (`record_request_time`); a client over its quota
//! gets the throttle time in its answer and its connection reads nothing more for that
//! long (KIP-219), and a throttled fetch answers no records, as Kafka's.
//!
//! Invariant: usage is measured per shard (a shard is to its connections what a Kafka
//! broker is to its own: a client whose connections land on two shards has the quota on
//! each, as a client of two brokers has); nothing is measured while no quota is set.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::describe_client_quotas_response as describe;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::Command;
use crate::common::errors::code;
use crate::security::acl::op;
use crate::security::quota::{self, QuotaEntity, QuotaValue, Rate, UsageKey, CLIENT_ID, USER};
use crate::shard::Shard;

/// DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

thread_local! {
    /// This shard's usage per quota key and owner (a shard is a thread).
    static USAGE: RefCell<HashMap<(&'static str, UsageKey), Rate>> = RefCell::new(HashMap::new());
    /// The instant quota times count from on this shard (monotonic, unlike the wall clock).
    static EPOCH: std::time::Instant = crate::common::clock::now();
}

/// Usage counters a shard keeps before it drops the idle ones.
const USAGE_ENTRIES_PRUNE_AT: usize = 10_000;

/// Milliseconds on this shard's quota clock.
fn now_ms() -> u64 {
    EPOCH.with(|e| {
        crate::common::clock::now()
            .saturating_duration_since(*e)
            .as_millis() as u64
    })
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// Records `value` (bytes) against quota `key` of the connection's principal and client
/// id: the throttle time in ms, 0 under its quota or without one. A throttled connection
/// is muted for that long.
pub fn record(shard: &Shard, ctx: &Ctx, key: &'static str, value: f64) -> u64 {
    let throttle_ms = record_for(shard, &ctx.principal, &ctx.client_id, key, value);
    if throttle_ms > 0 {
        ctx.mute_for(Duration::from_millis(throttle_ms));
    }
    throttle_ms
}

/// A Produce's size counted against `producer_byte_rate` as its frame is read, before
/// the next one is (Kafka reads one request of a connection at a time, so a throttled
/// producer's next request waits; counting in the handler would let every request
/// already pipelined through first): the throttle time for its answer. A throttled
/// connection is muted for that long.
pub fn record_produce(shard: &Shard, conn: &super::Conn, frame: &[u8]) -> u64 {
    if shard.metadata().quotas.is_empty() {
        return 0;
    }
    let client_id = client_id_of(frame).unwrap_or_default();
    let key = quota::PRODUCER_BYTE_RATE;
    let throttle_ms = record_for(shard, &conn.principal, &client_id, key, frame.len() as f64);
    if throttle_ms > 0 {
        let until = crate::common::clock::now() + Duration::from_millis(throttle_ms);
        conn.muted_until.set(Some(until));
    }
    throttle_ms
}

thread_local! {
    /// Whether the metadata of this version holds a `request_percentage` quota.
    static REQUEST_QUOTAS: std::cell::Cell<(u64, bool)> = const { std::cell::Cell::new((0, false)) };
}

/// The client id of a request whose handler time is measured: `Some` only while some
/// `request_percentage` quota is set (otherwise nothing is measured).
pub fn request_quota_client(shard: &Shard, frame: &[u8]) -> Option<String> {
    let meta = shard.metadata();
    if meta.quotas.is_empty() {
        return None;
    }
    let any = REQUEST_QUOTAS.with(|c| match c.get() {
        (version, any) if version == meta.version => any,
        _ => {
            let any = meta
                .quotas
                .values()
                .any(|v| v.contains_key(quota::REQUEST_PERCENTAGE));
            c.set((meta.version, any));
            any
        }
    });
    any.then(|| client_id_of(frame).unwrap_or_default())
}

/// Records the shard time a request's handler took against the connection's
/// `request_percentage` quota: the throttle time for its answer (0 under its quota). A
/// throttled connection is muted for that long.
pub fn record_request_time(
    shard: &Shard,
    conn: &super::Conn,
    client_id: &str,
    spent: Duration,
) -> u64 {
    let value = spent.as_nanos() as f64 * quota::PERCENT_SECONDS_PER_NANO;
    let throttle_ms = record_for(
        shard,
        &conn.principal,
        client_id,
        quota::REQUEST_PERCENTAGE,
        value,
    );
    if throttle_ms > 0 {
        let until = crate::common::clock::now() + Duration::from_millis(throttle_ms);
        if conn.muted_until.get().is_none_or(|t| t < until) {
            conn.muted_until.set(Some(until));
        }
    }
    throttle_ms
}

/// The client id of a request frame's header (api key, version, correlation id, then a
/// nullable string in every header version).
fn client_id_of(frame: &[u8]) -> Option<String> {
    let len = i16::from_be_bytes(*frame.get(8..10)?.first_chunk::<2>()?);
    let len = usize::try_from(len).ok()?;
    let bytes = frame.get(10..10 + len)?;
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// `record` without the muting.
fn record_for(
    shard: &Shard,
    principal: &str,
    client_id: &str,
    key: &'static str,
    value: f64,
) -> u64 {
    let meta = shard.metadata();
    if meta.quotas.is_empty() {
        return 0;
    }
    let user = principal.strip_prefix("User:").unwrap_or(principal);
    let Some((owner, limit)) = quota::resolve(&meta.quotas, user, client_id, key) else {
        return 0;
    };
    let c = &shard.config;
    let now_ms = now_ms();
    let throttle_ms = USAGE.with(|u| {
        let mut u = u.borrow_mut();
        // Client ids are the peers' to choose: counters whose window emptied go before the
        // map grows past its bound (Kafka expires idle quota sensors the same way).
        if u.len() >= USAGE_ENTRIES_PRUNE_AT && !u.contains_key(&(key, owner.clone())) {
            u.retain(|_, r| !r.is_idle(now_ms));
        }
        let rate = u
            .entry((key, owner))
            .or_insert_with(|| Rate::new(c.quota_window_num, c.quota_window_size_seconds * 1000));
        rate.record(now_ms, value);
        rate.throttle_ms(now_ms, limit)
    });
    throttle_ms
}

/// Takes back `value` recorded against `key` (a throttled fetch answers no records).
pub fn unrecord(shard: &Shard, ctx: &Ctx, key: &'static str, value: f64) {
    let meta = shard.metadata();
    let user = ctx
        .principal
        .strip_prefix("User:")
        .unwrap_or(&ctx.principal);
    if let Some((owner, _)) = quota::resolve(&meta.quotas, user, &ctx.client_id, key) {
        let now_ms = now_ms();
        USAGE.with(|u| {
            if let Some(rate) = u.borrow_mut().get_mut(&(key, owner)) {
                rate.record(now_ms, -value);
            }
        });
    }
}

/// The entity of a request's (type, name) parts, or why it is refused.
fn entity_of<'a>(
    parts: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, String> {
    let mut e = QuotaEntity::default();
    for (kind, name) in parts {
        let slot = match kind {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            other => return Err(format!("unsupported quota entity type {other}")),
        };
        if slot.is_some() {
            return Err(format!("entity type {kind} given twice"));
        }
        *slot = Some(name.map(str::to_string));
    }
    Ok(e)
}

/// AlterClientQuotas: each entry's changes as one command.
pub async fn alter(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: AlterClientQuotasRequest = ctx.decode(body)?;
    let allowed = ctx.allowed_on_cluster(shard, op::ALTER_CONFIGS);
    let mut entries = Vec::with_capacity(r.entries.len());
    for e in &r.entries {
        let parts = e
            .entity
            .iter()
            .map(|p| (p.entity_type.as_str(), p.entity_name.as_deref()));
        let outcome = if allowed {
            change(shard, e, entity_of(parts), r.validate_only).await
        } else {
            Err((code::CLUSTER_AUTHORIZATION_FAILED, "not authorized".into()))
        };
        let (error_code, message) = match outcome {
            Ok(()) => (code::NONE, None),
            Err((c, m)) => (c, Some(s(m))),
        };
        let entity = e
            .entity
            .iter()
            .map(|p| {
                EntityData::default()
                    .with_entity_type(p.entity_type.clone())
                    .with_entity_name(p.entity_name.clone())
            })
            .collect();
        entries.push(
            EntryData::default()
                .with_error_code(error_code)
                .with_error_message(message)
                .with_entity(entity),
        );
    }
    ctx.respond(&AlterClientQuotasResponse::default().with_entries(entries))
}

/// One entry of AlterClientQuotas: checked, then committed unless `validate_only`.
async fn change(
    shard: &Rc<Shard>,
    e: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
    entity: Result<QuotaEntity, String>,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let entity = entity.map_err(|m| (code::INVALID_REQUEST, m))?;
    let mut set = std::collections::BTreeMap::new();
    let mut remove = Vec::new();
    for o in &e.ops {
        let key = o.key.to_string();
        if !quota::KEYS.contains(&key.as_str()) {
            let m = format!(
                "quota {key} is not supported (supported: {})",
                quota::KEYS.join(", ")
            );
            return Err((code::INVALID_REQUEST, m));
        }
        if o.remove {
            remove.push(key);
        } else {
            set.insert(key, QuotaValue(o.value));
        }
    }
    let cmd = Command::AlterClientQuota {
        entity,
        set,
        remove,
    };
    let mut trial = (*shard.metadata()).clone();
    trial
        .apply(&cmd)
        .map_err(|e| (e.kafka_code(), e.to_string()))?;
    if validate_only {
        return Ok(());
    }
    for r in super::topics::commit(shard, vec![cmd]).await {
        r.map_err(|e| (e.kafka_code(), e.to_string()))?;
    }
    Ok(())
}

/// Whether `entity` matches every component (and, `strict`, has no other part).
fn matches(
    entity: &QuotaEntity,
    components: &[kafka_protocol::messages::describe_client_quotas_request::ComponentData],
    strict: bool,
) -> Result<bool, String> {
    let mut named = (false, false);
    for c in components {
        let (part, seen) = match c.entity_type.as_str() {
            USER => (&entity.user, &mut named.0),
            CLIENT_ID => (&entity.client_id, &mut named.1),
            other => return Err(format!("unsupported quota entity type {other}")),
        };
        *seen = true;
        let ok = match (c.match_type, part) {
            (_, None) => false,
            (MATCH_EXACT, Some(name)) => name.as_deref() == c._match.as_deref(),
            (MATCH_DEFAULT, Some(name)) => name.is_none(),
            (MATCH_ANY, Some(_)) => true,
            (t, _) => return Err(format!("unknown match type {t}")),
        };
        if !ok {
            return Ok(false);
        }
    }
    let extra = (entity.user.is_some() && !named.0) || (entity.client_id.is_some() && !named.1);
    Ok(!(strict && extra))
}

/// DescribeClientQuotas.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DescribeClientQuotasRequest = ctx.decode(body)?;
    let fail = |c: i16, m: String| {
        ctx.respond(
            &DescribeClientQuotasResponse::default()
                .with_error_code(c)
                .with_error_message(Some(s(m)))
                .with_entries(None),
        )
    };
    if !ctx.allowed_on_cluster(shard, op::DESCRIBE_CONFIGS) {
        return fail(code::CLUSTER_AUTHORIZATION_FAILED, "not authorized".into());
    }
    let meta = shard.metadata();
    let mut entries = Vec::new();
    for (entity, values) in &meta.quotas {
        match matches(entity, &r.components, r.strict) {
            Err(m) => return fail(code::INVALID_REQUEST, m),
            Ok(false) => continue,
            Ok(true) => {}
        }
        let part = |kind: &str, name: &Option<String>| {
            describe::EntityData::default()
                .with_entity_type(s(kind))
                .with_entity_name(name.clone().map(s))
        };
        let parts = [(USER, &entity.user), (CLIENT_ID, &entity.client_id)]
            .into_iter()
            .filter_map(|(k, n)| n.as_ref().map(|n| part(k, n)))
            .collect();
        let values = values
            .iter()
            .map(|(k, v)| {
                describe::ValueData::default()
                    .with_key(s(k.clone()))
                    .with_value(v.0)
            })
            .collect();
        entries.push(
            describe::EntryData::default()
                .with_entity(parts)
                .with_values(values),
        );
    }
    ctx.respond(&DescribeClientQuotasResponse::default().with_entries(Some(entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_id_is_read_from_the_header() {
        let mut frame = vec![0, 0, 0, 9, 0, 0, 0, 7, 0, 3];
        frame.extend_from_slice(b"app");
        frame.extend_from_slice(&[0, 0]);
        assert_eq!(client_id_of(&frame).as_deref(), Some("app"));
        assert_eq!(client_id_of(&[0, 0, 0, 9, 0, 0, 0, 7, 0xff, 0xff]), None);
        assert_eq!(client_id_of(&[0, 0, 0, 9, 0, 0, 0, 7, 0, 9, b'a']), None);
        assert_eq!(client_id_of(&[0, 0]), None);
    }
}
