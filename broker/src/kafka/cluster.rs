//! DescribeCluster: this node, the cluster id, the controller.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::shard::Shard;

/// DescribeCluster.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: DescribeClusterRequest = ctx.decode(body)?;
    let c = &shard.config;
    let broker = DescribeClusterBroker::default()
        .with_broker_id(BrokerId(c.node_id))
        .with_host(StrBytes::from_string(c.advertised_host.clone()))
        .with_port(i32::from(c.kafka_addr.port()));
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(shard.metadata().cluster_id.clone()))
        .with_controller_id(BrokerId(c.node_id))
        .with_endpoint_type(req.endpoint_type)
        .with_brokers(vec![broker]);
    if req.endpoint_type != 1 {
        resp = resp
            .with_error_code(42)
            .with_error_message(Some(StrBytes::from_static_str(
                "only broker endpoints are served",
            )));
    }
    ctx.respond(&resp)
}
