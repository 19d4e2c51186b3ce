//! Strand's partition log (ARCHITECTURE.md, Storage and Offsets).
//!
//! Main types: [`Log`] (one partition: append, group-commit flush, reads by Kafka offset,
//! Raft index and timestamp, truncation, retention, recovery), [`BatchCache`] (the shard's
//! cache of recent frames), [`frame`] (the on-disk frame format) and [`io_runtime`]
//! (locked-memory planning and an executor for non-broker users). `log_clean` rewrites
//! closed segments for log compaction, frame by frame as its caller decides.
//!
//! This crate never touches the network, never decodes records (only batch headers), and
//! never picks Kafka offsets or Raft indexes out of order. glommio appears only in `io*`.

pub mod budget;
pub mod cache;
pub mod clock;
pub mod config;
pub mod device_flush;
pub mod error;
pub mod frame;
pub mod fuzz;
pub mod io;
mod io_mem;
pub mod io_runtime;
pub mod io_sim;
pub mod log;
pub mod log_clean;
pub mod log_flush;
pub mod log_read;
pub mod log_truncate;
pub mod read_ahead;
pub mod recovery;
pub mod segment;
mod tail_buf;
pub mod types;

pub use budget::{ForegroundWrite, IoBudget};
pub use cache::{BatchCache, CacheStats, BATCH_CACHE_BYTES_DEFAULT};
pub use config::{
    Clock, LogConfig, SystemClock, TAIL_PENDING_BYTES_WAIT, ZERO_AHEAD_MIN_SEGMENT_BYTES,
};
pub use error::StorageError;
pub use frame::{FrameHeader, FrameKind};
pub use log::{AppendEntry, Appended, Durable, Log, LogStats};
pub use log_clean::{FrameRewrite, RewriteOutcome, SegmentInfo};
pub use log_flush::{FlushJob, FlushOutcome};
pub use log_read::{LogFrame, ReadBatches};
pub use log_truncate::{RetentionCut, RetentionOutcome};
pub use types::{FilePos, KafkaOffset, RaftIndex, RaftTerm};
