//! InitProducerId for idempotent producers: a producer id never handed out before (ids
//! are reserved in blocks in the metadata log), epoch 0. Transactions are not implemented:
//! a transactional id is refused, and the transaction APIs are not advertised.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// InitProducerId.
pub async fn init(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: InitProducerIdRequest = ctx.decode(body)?;
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req.transactional_id.is_some() {
        return ctx.respond(&resp.with_error_code(code::INVALID_REQUEST));
    }
    let resp = match shard.call(0, Op::AllocateProducerId).await {
        Reply::ProducerId(Ok(id)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Reply::ProducerId(Err(e)) => resp.with_error_code(e.kafka_code()),
        _ => resp.with_error_code(-1),
    };
    ctx.respond(&resp)
}
