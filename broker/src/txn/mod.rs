//! Kafka transactions at the coordinator (issue 22): the state of each transactional id
//! and the transitions allowed between states (`metadata`), and the records that keep it in
//! `__transaction_state` (`records`). The partition side (markers,
//! the last stable offset, the aborted-transaction index) is `partition::txn_index`.
//!
//! Not wired to requests yet: until the coordinator persists this state in
//! `__transaction_state` and writes markers, the transactional APIs are not advertised and
//! InitProducerId with a transactional id is refused.

pub mod metadata;
pub mod records;
