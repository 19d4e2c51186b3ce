//! `strandctl transactions`: list, describe, producers, abort (the `kafka-transactions.sh`
//! equivalent; ListTransactions, FindCoordinator + DescribeTransactions, DescribeProducers,
//! WriteTxnMarkers).
//!
//! Invariant: `abort` writes an abort marker only for the producer whose open transaction
//! starts at the offset given, as the partition's leader describes it just before (so a
//! transaction that ended meanwhile, or a wrong offset, writes nothing).

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest,
    ListTransactionsRequest, MetadataRequest, ProducerId, TopicName, TransactionalId,
    WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::cli::TransactionsCmd;
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::output::Table;
use crate::route::Router;
use crate::Refused;

/// Runs a `transactions` subcommand and returns what to print.
pub fn run(
    client: &mut KafkaClient,
    cmd: &TransactionsCmd,
    timeout: Duration,
) -> anyhow::Result<String> {
    match cmd {
        TransactionsCmd::List => Ok(list(client, timeout)?),
        TransactionsCmd::Describe { transactional_id } => {
            Ok(describe(client, transactional_id, timeout)?)
        }
        TransactionsCmd::Producers { topic, partition } => {
            let (_, text) = producers(client, topic, *partition)?;
            Ok(text)
        }
        TransactionsCmd::Abort {
            topic,
            partition,
            start_offset,
        } => abort(client, topic, *partition, *start_offset),
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Every broker's ListTransactions, merged (each lists the ids it coordinates); an
/// unreachable broker is reported on stderr and skipped.
fn list(client: &mut KafkaClient, timeout: Duration) -> Result<String, KafkaError> {
    let resp = client.send(&MetadataRequest::default().with_topics(Some(Vec::new())))?;
    let brokers: BTreeSet<String> = crate::topic::broker_addrs(&resp).into_values().collect();
    let mut rows: BTreeSet<(String, i64, String)> = list_one(client)?.into_iter().collect();
    for addr in brokers.iter().filter(|a| a.as_str() != client.addr()) {
        match KafkaClient::connect(addr, timeout).and_then(|mut other| list_one(&mut other)) {
            Ok(r) => rows.extend(r),
            Err(e) => eprintln!("strandctl: transactions of {addr} not listed: {e}"),
        }
    }
    let mut t = Table::new(&["TRANSACTIONAL_ID", "PRODUCER_ID", "STATE"]);
    for (id, pid, state) in rows {
        t.row(vec![id, pid.to_string(), state]);
    }
    Ok(t.render())
}

fn list_one(client: &mut KafkaClient) -> Result<Vec<(String, i64, String)>, KafkaError> {
    let resp = client.send(&ListTransactionsRequest::default().with_duration_filter(-1))?;
    check_code(resp.error_code, "list transactions", None)?;
    Ok(resp
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.0.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect())
}

/// The transaction's coordinator (FindCoordinator key type 1), then DescribeTransactions.
fn describe(client: &mut KafkaClient, id: &str, timeout: Duration) -> Result<String, KafkaError> {
    let req = FindCoordinatorRequest::default()
        .with_key(s(id))
        .with_key_type(1);
    let resp = client.send(&req)?;
    let what = format!("find the coordinator of transactional id {id}");
    check_code(resp.error_code, &what, resp.error_message.as_ref())?;
    let addr = format!("{}:{}", resp.host.as_str(), resp.port);
    let mut other;
    let coord = if addr == client.addr() {
        client
    } else {
        other = KafkaClient::connect(&addr, timeout)?;
        &mut other
    };
    let resp = coord.send(
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(id))]),
    )?;
    let Some(st) = resp.transaction_states.first() else {
        return Err(KafkaError::Broker {
            what: format!("describe transaction {id}"),
            name: "NO_ANSWER".into(),
            code: -1,
            detail: ": the broker answered nothing for it".into(),
        });
    };
    check_code(st.error_code, &format!("describe transaction {id}"), None)?;
    let partitions: Vec<String> = st
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| format!("{}-{p}", t.topic.0))
        })
        .collect();
    let mut t = Table::new(&[
        "COORDINATOR",
        "TRANSACTIONAL_ID",
        "PRODUCER_ID",
        "PRODUCER_EPOCH",
        "STATE",
        "TIMEOUT_MS",
        "START_MS",
        "PARTITIONS",
    ]);
    t.row(vec![
        addr,
        id.to_string(),
        st.producer_id.0.to_string(),
        st.producer_epoch.to_string(),
        st.transaction_state.to_string(),
        st.transaction_timeout_ms.to_string(),
        st.transaction_start_time_ms.to_string(),
        if partitions.is_empty() {
            "-".into()
        } else {
            partitions.join(",")
        },
    ]);
    Ok(t.render())
}

/// One producer of a partition as its leader describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Producer {
    id: i64,
    epoch: i16,
    txn_start_offset: i64,
}

/// DescribeProducers on the partition's leader: the producers and the table to print.
fn producers(
    client: &mut KafkaClient,
    topic: &str,
    partition: i32,
) -> anyhow::Result<(Vec<Producer>, String)> {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    let mut router = Router::new(client, topic, false)?;
    let leader = router
        .leader_of(partition)
        .ok_or_else(|| Refused(format!("{topic}-{partition} has no leader now")))?;
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(s(topic)))
        .with_partition_indexes(vec![partition])]);
    let resp = router.client(leader)?.send(&req)?;
    let p = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| Refused(format!("no answer for {topic}-{partition}")))?;
    check_code(
        p.error_code,
        &format!("describe producers of {topic}-{partition}"),
        p.error_message.as_ref(),
    )?;
    let list: Vec<Producer> = p
        .active_producers
        .iter()
        .map(|a| Producer {
            id: a.producer_id.0,
            epoch: i16::try_from(a.producer_epoch).unwrap_or(i16::MAX),
            txn_start_offset: a.current_txn_start_offset,
        })
        .collect();
    let mut t = Table::new(&[
        "PRODUCER_ID",
        "PRODUCER_EPOCH",
        "LAST_SEQUENCE",
        "TXN_START_OFFSET",
    ]);
    for a in &p.active_producers {
        t.row(vec![
            a.producer_id.0.to_string(),
            a.producer_epoch.to_string(),
            a.last_sequence.to_string(),
            a.current_txn_start_offset.to_string(),
        ]);
    }
    Ok((list, t.render()))
}

/// The producer whose open transaction starts at `start_offset`, if any.
fn hanging_at(producers: &[Producer], start_offset: i64) -> Option<Producer> {
    producers
        .iter()
        .copied()
        .find(|p| p.txn_start_offset >= 0 && p.txn_start_offset == start_offset)
}

/// Aborts the transaction open in `topic`-`partition` from `start_offset` (a hanging one:
/// its producer and coordinator gone) with an abort marker written by the leader.
fn abort(
    client: &mut KafkaClient,
    topic: &str,
    partition: i32,
    start_offset: i64,
) -> anyhow::Result<String> {
    let (list, _) = producers(client, topic, partition)?;
    let Some(p) = hanging_at(&list, start_offset) else {
        return Err(Refused(format!(
            "no transaction of {topic}-{partition} starts at offset {start_offset} \
             (see `strandctl transactions producers {topic} {partition}`)"
        ))
        .into());
    };
    let mut router = Router::new(client, topic, false)?;
    let leader = router
        .leader_of(partition)
        .ok_or_else(|| Refused(format!("{topic}-{partition} has no leader now")))?;
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(p.id))
        .with_producer_epoch(p.epoch)
        .with_transaction_result(false)
        .with_coordinator_epoch(-1)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partition_indexes(vec![partition])])]);
    let resp = router.client(leader)?.send(&req)?;
    let code = resp
        .markers
        .first()
        .and_then(|m| m.topics.first())
        .and_then(|t| t.partitions.first())
        .map_or(-1, |p| p.error_code);
    check_code(
        code,
        &format!(
            "abort the transaction of producer {} in {topic}-{partition}",
            p.id
        ),
        None,
    )?;
    Ok(format!(
        "aborted the transaction of producer {} (epoch {}) in {topic}-{partition} from offset {start_offset}\n",
        p.id, p.epoch
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_picks_only_the_transaction_starting_at_the_offset() {
        let ps = [
            Producer {
                id: 1,
                epoch: 0,
                txn_start_offset: -1,
            },
            Producer {
                id: 2,
                epoch: 3,
                txn_start_offset: 40,
            },
            Producer {
                id: 3,
                epoch: 0,
                txn_start_offset: 55,
            },
        ];
        assert_eq!(hanging_at(&ps, 40).map(|p| (p.id, p.epoch)), Some((2, 3)));
        assert_eq!(hanging_at(&ps, 41), None);
        assert_eq!(
            hanging_at(&ps, -1),
            None,
            "a producer without a transaction"
        );
    }
}
