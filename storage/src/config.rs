//! Per-partition log configuration (Kafka topic-config names, with units) and the clock.

use std::time::Duration;

/// Kafka's `segment.bytes` default.
pub const SEGMENT_BYTES_DEFAULT: u64 = 128 * 1024 * 1024;
/// Smallest `segment.bytes` accepted (Kafka's minimum is 14 bytes of header; ours must hold
/// at least one frame header and one alignment unit).
pub const SEGMENT_BYTES_MIN: u64 = 4096;
/// Kafka's `segment.ms` default (7 days).
pub const SEGMENT_MS_DEFAULT: i64 = 7 * 24 * 3600 * 1000;
/// Kafka's `retention.ms` default (7 days).
pub const RETENTION_MS_DEFAULT: i64 = 7 * 24 * 3600 * 1000;
/// Bytes of log between two sparse index entries (Kafka's `index.interval.bytes`).
pub const INDEX_INTERVAL_BYTES: u64 = 4096;
/// Step by which the active segment is `fallocate`d ahead of the write position.
pub const PREALLOCATE_STEP_BYTES: u64 = 32 * 1024 * 1024;
/// How far ahead of its data the active segment's preallocated space is kept written with
/// zeros (once it holds `ZERO_AHEAD_MIN_SEGMENT_BYTES`), a piece beside each small flush's
/// write. `fallocate` leaves unwritten extents, and a durable write into one must also
/// make its conversion to written durable (on ext4 a journal commit); a write into zeroed
/// blocks needs only the device flush the shard's partitions share (`device_flush`).
/// Measured on ext4/virtio: 4 KiB O_DSYNC writes p50 215 -> 112..143 us.
pub const ZERO_AHEAD_BYTES: u64 = 1024 * 1024;
/// Zeros written beside one flush at most: small pieces add little to each device flush
/// (a 256 KiB piece with its own sync, every 256 KiB, was behind 87% of a 16-partition
/// engine's slowest flushes).
pub const ZERO_PIECE_BYTES: u64 = 64 * 1024;
/// Zeros are written without a sync of their own; once the blocks known written and
/// durable end within this many bytes of the data, the next flush syncs its own file (one
/// journal commit makes every piece written before it durable) instead of sharing the
/// device flush.
pub const ZERO_SYNC_MARGIN_BYTES: u64 = 256 * 1024;
const _: () = assert!(ZERO_PIECE_BYTES < ZERO_SYNC_MARGIN_BYTES);
const _: () = assert!(ZERO_SYNC_MARGIN_BYTES < ZERO_AHEAD_BYTES);
/// Zeros go ahead only beside flushes of at most this many bytes: a larger write
/// amortizes its conversion, and on a throughput-bound disk zeros would double the bytes
/// written.
pub const ZERO_AHEAD_FLUSH_BYTES_MAX: u64 = 64 * 1024;
/// Most bytes of zeros in flight per thread (shard): bounds the buffers when many
/// partitions flush at once (they skip zeroing meanwhile).
pub const ZERO_AHEAD_IN_FLIGHT_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// A segment is zeroed ahead only from this size on: idle partitions (a Raft no-op each)
/// write no zeros.
pub const ZERO_AHEAD_MIN_SEGMENT_BYTES: u64 = 64 * 1024;
/// First preallocation of a segment; it doubles as the segment grows, up to the step.
/// Small, because every idle partition holds one: 10,000 partitions hold 640 MiB.
pub const PREALLOCATE_MIN_BYTES: u64 = 64 * 1024;
/// Largest amount of appended-but-unflushed data a log holds; appends past it fail with
/// `TailFull` until a flush succeeds (bounds memory while the disk is full or slow).
pub const TAIL_PENDING_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Appended-but-unflushed bytes past which a writer that does not wait for durability
/// (acks=0/1) should wait for the flush anyway: producers then go at the disk's rate (as
/// a page-cache broker's writes block on dirty pages) instead of filling the tail up to
/// `TAIL_PENDING_BYTES_MAX` and being refused ([`crate::Log::pending_bytes`]).
pub const TAIL_PENDING_BYTES_WAIT: u64 = 32 * 1024 * 1024;
const _: () = assert!(TAIL_PENDING_BYTES_WAIT * 4 <= TAIL_PENDING_BYTES_MAX);
const _: () = assert!(SEGMENT_BYTES_MIN <= SEGMENT_BYTES_DEFAULT);

/// Largest `LogConfig::flush_min_interval_us`: pacing is for trading a fraction of a
/// millisecond of latency for fewer I/Os, not for delaying acknowledgements by seconds.
pub const FLUSH_MIN_INTERVAL_US_MAX: u64 = 100_000;

/// Configuration of one partition log.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Roll the active segment once it holds this many bytes (`segment.bytes`).
    pub segment_bytes: u64,
    /// Roll the active segment once it is this old (`segment.ms`).
    pub segment_ms: i64,
    /// Delete closed segments whose newest record is older than this; -1 = never.
    pub retention_ms: i64,
    /// Delete oldest closed segments while the log stays above this size; -1 = never.
    pub retention_bytes: i64,
    /// `fallocate` step for the active segment; 0 disables preallocation.
    pub preallocate_bytes: u64,
    /// Operator opted in to buffered I/O when the directory cannot do O_DIRECT.
    pub allow_buffered_io: bool,
    /// Least time between the starts of two flushes of this log (group commit pacing):
    /// a flush due sooner waits out the rest, gathering the appends that arrive
    /// meanwhile into it. 0 (the default) starts the next flush as soon as the previous
    /// one ends. The broker's flush loop applies it (`group_commit_min_interval_us`).
    pub flush_min_interval_us: u64,
    /// A flush whose O_DIRECT write lands in blocks already written may be made durable
    /// by the device flush the thread's logs share (`device_flush`) rather than its own
    /// fdatasync (only on filesystems that overwrite in place).
    pub shared_device_flush: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            segment_ms: SEGMENT_MS_DEFAULT,
            retention_ms: RETENTION_MS_DEFAULT,
            retention_bytes: -1,
            preallocate_bytes: PREALLOCATE_STEP_BYTES,
            allow_buffered_io: false,
            flush_min_interval_us: 0,
            shared_device_flush: true,
        }
    }
}

impl LogConfig {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes < SEGMENT_BYTES_MIN {
            return Err(format!(
                "segment.bytes {} is below the minimum {SEGMENT_BYTES_MIN}",
                self.segment_bytes
            ));
        }
        if self.segment_ms <= 0 {
            return Err(format!("segment.ms {} must be positive", self.segment_ms));
        }
        if self.flush_min_interval_us > FLUSH_MIN_INTERVAL_US_MAX {
            return Err(format!(
                "flush_min_interval_us {} is above the maximum {FLUSH_MIN_INTERVAL_US_MAX}",
                self.flush_min_interval_us
            ));
        }
        if self.retention_ms < -1 || self.retention_bytes < -1 {
            return Err("retention.ms and retention.bytes must be -1 or non-negative".into());
        }
        Ok(())
    }
}

/// Wall-clock source, injected so simulations control time (STYLE.md 9).
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The real clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}
