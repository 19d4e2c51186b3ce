//! Share groups (KIP-932, queues on Kafka topics): membership and assignment (`group`),
//! the delivery state of each share partition (`partition`), and share sessions
//! (`session`), and the `__share_group_state` records that persist the delivery state
//! (`records`). Served only with `group_share_enable` (off by default, single node only:
//! see issue 29's note for what remains).
//!
//! May use: `common`, `group` (the member-id hash and the assignment type).

pub mod group;
pub mod partition;
pub mod records;
pub mod session;
