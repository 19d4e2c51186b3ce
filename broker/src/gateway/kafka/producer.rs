//! InitProducerId for idempotent producers: a producer id never handed out before (ids
//! are reserved in blocks in the metadata log), epoch 0. With a transactional id the
//! request goes to that id's transaction coordinator (`txn`).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::security::acl::{op, resource};
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// InitProducerId.
pub async fn init(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: InitProducerIdRequest = ctx.decode(body.clone())?;
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if let Some(id) = req.transactional_id.as_ref() {
        return super::txn::route(shard, ctx, &id.0, body).await;
    }
    // An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    let idempotent_ok = ctx.allowed_on_cluster(shard, op::IDEMPOTENT_WRITE)
        || ctx.allowed_on_any(shard, op::WRITE, resource::TOPIC);
    if !idempotent_ok {
        return ctx.respond(&resp.with_error_code(code::CLUSTER_AUTHORIZATION_FAILED));
    }
    let resp = match shard.call(0, Op::AllocateProducerId).await {
        Reply::ProducerId(Ok(id)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Reply::ProducerId(Err(e)) => resp.with_error_code(e.kafka_code()),
        _ => resp.with_error_code(-1),
    };
    ctx.respond(&resp)
}
