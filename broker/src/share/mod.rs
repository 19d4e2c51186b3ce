//! Share groups (KIP-932, queues on Kafka topics): membership and assignment (`group`),
//! and the delivery state of each share partition (`partition`). Not yet served: no share API is advertised or answered (see
//! issue 29's note for what remains).
//!
//! May use: `common`, `group` (the member-id hash and the assignment type).

pub mod group;
pub mod partition;
