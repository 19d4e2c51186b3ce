//! Share groups (KIP-932, queues on Kafka topics): membership and assignment (`group`),
//! the delivery state of each share partition (`partition`), and share sessions
//! (`session`), the `__share_group_state` records that persist the delivery state
//! (`records`), and that state between nodes (`remote`: Kafka's ReadShareGroupState and
//! WriteShareGroupState to the node leading the state's partition). Served only with
//! `group_share_enable` (on by default).
//!
//! May use: `common`, `group` (the member-id hash and the assignment type), `cluster`
//! (`net`: one request to another node's Kafka listener).

pub mod group;
pub mod partition;
pub mod records;
pub mod remote;
pub mod session;
