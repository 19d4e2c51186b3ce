//! Kafka transactions at the coordinator (issue 22): the state of each transactional id
//! and the transitions allowed between states (`metadata`), the records that keep it in
//! `__transaction_state` (`records`), and the requests that change it, with the markers
//! they write (`coordinator`). The partition side (markers, the last stable offset, the
//! aborted-transaction index) is `partition::txn_index`.
//!
//! May use: `common`, `runtime`, `partition`, `replication`, `cluster`, and `group` for
//! its partition placement. The coordinator runs over the shard that owns the ids'
//! partitions through [`coordinator::TxnHost`], which the shard implements.

pub mod coordinator;
pub mod metadata;
pub mod records;
