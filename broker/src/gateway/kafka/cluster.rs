//! DescribeCluster (the brokers, the cluster id, the controller) and UnregisterBroker
//! (removing a node from the cluster).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, UnregisterBrokerRequest,
    UnregisterBrokerResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::Command;
use crate::cluster::ClusterHost;
use crate::common::errors::code;
use crate::security::acl::op;
use crate::shard::Shard;

/// DescribeCluster: the same brokers and controller as Metadata.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: DescribeClusterRequest = ctx.decode(body)?;
    if !ctx.allowed_on_cluster(shard, op::DESCRIBE) {
        return ctx.respond(
            &DescribeClusterResponse::default()
                .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
                .with_cluster_authorized_operations(i32::MIN),
        );
    }
    let listed = shard.brokers(ctx.listener_name(shard));
    let controller = shard.controller_id();
    let brokers = listed
        .into_iter()
        .map(|(id, host, port)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(StrBytes::from_string(host))
                .with_port(i32::from(port))
        })
        .collect();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(shard.metadata().cluster_id.clone()))
        .with_controller_id(BrokerId(controller))
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            super::authorized::cluster(ctx, shard)
        } else {
            i32::MIN
        })
        .with_brokers(brokers);
    if req.endpoint_type != 1 {
        resp = resp
            .with_error_code(code::INVALID_REQUEST)
            .with_error_message(Some(StrBytes::from_static_str(
                "only broker endpoints are served",
            )));
    }
    ctx.respond(&resp)
}

/// UnregisterBroker: removes a node from the cluster once it holds no replica (see
/// `Command::RemoveNode`); a controller voter (the seeds, until AddRaftVoter and
/// RemoveRaftVoter name others) cannot leave.
pub async fn unregister(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: UnregisterBrokerRequest = ctx.decode(body)?;
    let id = req.broker_id.0;
    let refused = if !ctx.allowed_on_cluster(shard, op::ALTER) {
        Some((
            code::CLUSTER_AUTHORIZATION_FAILED,
            "not authorized on the cluster".to_string(),
        ))
    } else if !shard.clustered() {
        Some((
            code::INVALID_REQUEST,
            "a single-node broker has no node to remove".to_string(),
        ))
    } else if crate::cluster::controller_voters(&**shard).contains(&id) {
        Some((
            code::INVALID_REQUEST,
            format!(
                "node {id} is a controller voter and cannot leave: make another node a voter \
                 (AddRaftVoter, `strandctl cluster add-controller`) and remove this one \
                 (RemoveRaftVoter) first"
            ),
        ))
    } else {
        match super::topics::commit(shard, vec![Command::RemoveNode { id }])
            .await
            .pop()
        {
            Some(Ok(())) => None,
            Some(Err(e)) => Some((e.kafka_code(), e.to_string())),
            None => Some((-1, "no outcome".to_string())),
        }
    };
    let mut resp = UnregisterBrokerResponse::default();
    if let Some((code, message)) = refused {
        resp = resp
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)));
    }
    ctx.respond(&resp)
}
