//! Group commit: one durable write per segment with pending bytes, per flush: a write and
//! then this file's fdatasync, or, for a write into blocks already written and durable, a
//! write and the device flush the shard's logs share (`device_flush`: one flush for many
//! partitions).
//!
//! A flush is three steps so appends continue while the I/O is in flight:
//! [`Log::begin_flush`] (synchronous: copies the pending tail into a job),
//! [`FlushJob::run`] (the I/O, no borrow of the log), [`Log::complete_flush`]
//! (synchronous: advances `flushed_pos`, trims tails, reports what is durable).
//! Only one flush may be in flight per log.
//!
//! Beside a small data write, a flush may write a piece of zeros over preallocated space
//! after it (`config::ZERO_AHEAD_BYTES`), so later durable writes land in written blocks.
//! The zeros get no sync of their own: they count as written (`Tail::zeros_to`) at once
//! and as durable (`Tail::zeroed_to`) after the file's next own fdatasync, which a flush
//! does when the durable ones end near its data (`config::ZERO_SYNC_MARGIN_BYTES`).
//!
//! Invariant: `durable` only advances over bytes whose durable write returned `Ok`, and
//! over new files only after their directory entry was fsynced. Zeros are written only
//! after the end of the data a flush writes, never over data, and only into space the
//! segment's preallocation reserved. `Tail::zeroed_to` only advances over blocks whose
//! write completed before an own sync of the file, so a write joining the shared device
//! flush (below it) never needs metadata made durable.

use std::path::PathBuf;
use std::rc::Rc;

use crate::config::{
    PREALLOCATE_MIN_BYTES, ZERO_AHEAD_BYTES, ZERO_AHEAD_FLUSH_BYTES_MAX,
    ZERO_AHEAD_IN_FLIGHT_BYTES_MAX, ZERO_AHEAD_MIN_SEGMENT_BYTES, ZERO_PIECE_BYTES,
    ZERO_SYNC_MARGIN_BYTES,
};
use crate::error::StorageError;
use crate::io::{self, align_down, align_up, IoFault, SegmentFile, SharedFile, WriteSync};
use crate::log::{Durable, Log};
use crate::segment::SegmentName;
use crate::tail_buf::FlushBytes;
use crate::types::{KafkaOffset, RaftIndex};

thread_local! {
    /// Bytes of zeros being written ahead on this thread (its shard's logs).
    static ZEROING_BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Work for one segment.
struct WriteOp {
    /// The segment (its file path is built only when needed: formatting it every flush
    /// showed in profiles).
    name: SegmentName,
    file: Option<SharedFile>,
    pos: u64,
    /// The bytes to write at `pos` (none when only finalizing).
    data: Option<FlushBytes>,
    target_pos: u64,
    preallocate_to: Option<u64>,
    /// Preallocated bytes `[from, to)` after the data to write with zeros (never
    /// overlapping the data write).
    zero: Option<(u64, u64)>,
    finalize: Option<(u64, Vec<u8>, Vec<u8>)>,
    last_index: RaftIndex,
    next_offset: KafkaOffset,
    /// End of the blocks written and durable before this flush (`Tail::zeroed_to`): a
    /// data write below it needs only a device flush (`device_flush`), if `flush_device`.
    durable_to: u64,
    /// End of the blocks written before this flush, durably or not (`Tail::zeros_to`).
    zeros_to: u64,
    /// Sync the file itself (not the shared device flush), making the zeros written so
    /// far durable: the durable ones end near the data.
    commit: bool,
    /// The device of the log's directory when it does O_DIRECT on a filesystem that
    /// overwrites in place and its config lets it share device flushes.
    flush_device: Option<u64>,
}

/// A segment whose write and fdatasync succeeded.
struct DoneOp {
    key: RaftIndex,
    file: SharedFile,
    target_pos: u64,
    preallocated_to: u64,
    /// End of the blocks written and durable (data, zeros synced by this op).
    zeroed_to: u64,
    /// End of the written blocks, durable or not.
    zeros_to: u64,
    finalized: bool,
    last_index: RaftIndex,
    next_offset: KafkaOffset,
}

/// The I/O of one flush, detached from the log.
pub struct FlushJob {
    dir: PathBuf,
    ops: Vec<WriteOp>,
}

/// The result of a [`FlushJob`], to hand back to [`Log::complete_flush`].
pub struct FlushOutcome {
    done: Vec<DoneOp>,
    error: Option<(PathBuf, IoFault)>,
    writes: u64,
    bytes_written: u64,
    fdatasyncs: u64,
}

impl Log {
    /// Starts a flush of everything appended so far; `None` when nothing is pending.
    pub fn begin_flush(&self) -> Result<Option<FlushJob>, StorageError> {
        let mut st = self.st.borrow_mut();
        self.check_usable(&st)?;
        if st.flush_in_flight || st.busy {
            return Err(StorageError::Usage(
                "flush while another flush or truncation runs",
            ));
        }
        let step = self.config.borrow().preallocate_bytes;
        let mut ops = Vec::new();
        for seg in &st.segments {
            let Some(tail) = &seg.tail else { continue };
            let size = seg.meta.size_bytes;
            let pending = size > tail.flushed_pos;
            let finalize = seg
                .closed
                .then(|| (size, seg.meta.encode_index(), seg.meta.encode_time_index()));
            if !pending && finalize.is_none() {
                continue;
            }
            // The write goes from the tail's memory (no copy here); appends meanwhile
            // only add after its bytes.
            let data = pending.then(|| {
                let to_len = |end: u64| usize::try_from(end - tail.base_pos).unwrap_or(0);
                tail.buf.for_flush(to_len(size), to_len(align_up(size)))
            });
            let want = align_up(size);
            // The step grows with the segment (64 KiB, 128, ... up to `step`), so an idle
            // partition (one Raft no-op) holds 64 KiB of disk, not a whole step.
            let step_now = step.min(want.next_power_of_two().max(PREALLOCATE_MIN_BYTES));
            let preallocate_to =
                (pending && !seg.closed && step > 0 && want > tail.preallocated_to)
                    .then(|| want.div_ceil(step_now) * step_now);
            // Only for small flushes (latency-bound; a large write amortizes its
            // conversion, and zeros would double a throughput-bound disk's writes).
            let zero = (pending
                && !seg.closed
                && step > 0
                && want >= ZERO_AHEAD_MIN_SEGMENT_BYTES
                && want - tail.base_pos <= ZERO_AHEAD_FLUSH_BYTES_MAX
                && tail.zeros_to < want + ZERO_AHEAD_BYTES)
                .then(|| {
                    let from = tail.zeros_to.max(want);
                    let end = preallocate_to.unwrap_or(tail.preallocated_to);
                    (from, (from + ZERO_PIECE_BYTES).min(end))
                })
                .filter(|(from, to)| to > from);
            let commit = pending
                && tail.zeros_to > tail.zeroed_to
                && tail.zeroed_to < want + ZERO_SYNC_MARGIN_BYTES;
            ops.push(WriteOp {
                name: seg.meta.name,
                file: seg.file.clone(),
                pos: tail.base_pos,
                data,
                target_pos: size,
                preallocate_to,
                zero,
                finalize,
                last_index: seg.meta.last_index.unwrap_or(RaftIndex(0)),
                next_offset: seg.meta.next_offset,
                durable_to: tail.zeroed_to,
                zeros_to: tail.zeros_to,
                commit,
                flush_device: self
                    .flush_device
                    .filter(|_| self.config.borrow().shared_device_flush),
            });
        }
        if ops.is_empty() {
            return Ok(None);
        }
        st.flush_in_flight = true;
        Ok(Some(FlushJob {
            dir: self.dir.clone(),
            ops,
        }))
    }

    /// Applies a finished job. Returns what is durable now, or the error that stopped it
    /// (ENOSPC leaves the data pending for a retry; anything else fences the log).
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn complete_flush(&self, outcome: FlushOutcome) -> Result<Durable, StorageError> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        st.flush_in_flight = false;
        st.stats.writes += outcome.writes;
        st.stats.bytes_written += outcome.bytes_written;
        st.stats.fdatasyncs += outcome.fdatasyncs;
        for done in outcome.done {
            let DoneOp {
                key,
                file,
                target_pos,
                preallocated_to: prealloc,
                zeroed_to,
                zeros_to,
                finalized,
                ..
            } = done;
            if done.last_index.0 > 0 {
                let now = Durable {
                    last_index: done.last_index,
                    next_offset: done.next_offset,
                };
                st.durable = now.max(st.durable);
            }
            let Some(seg) = st
                .segments
                .iter_mut()
                .find(|s| s.meta.name.raft_base_index == key)
            else {
                continue;
            };
            if seg.file.is_none() {
                seg.file = Some(file);
            }
            let Some(tail) = seg.tail.as_mut() else {
                continue;
            };
            assert!(
                target_pos >= tail.flushed_pos,
                "flush went back: {target_pos}"
            );
            assert!(
                target_pos <= seg.meta.size_bytes,
                "flushed past append: {target_pos}"
            );
            tail.flushed_pos = target_pos;
            tail.preallocated_to = tail.preallocated_to.max(prealloc);
            tail.zeroed_to = tail.zeroed_to.max(zeroed_to);
            tail.zeros_to = tail.zeros_to.max(zeros_to).max(tail.zeroed_to);
            // A closed, fully flushed segment is never written again, so its buffer can go;
            // otherwise keep the partial last page for the next aligned rewrite.
            let done = seg.closed && target_pos == seg.meta.size_bytes;
            let new_base = if done {
                target_pos
            } else {
                align_down(target_pos)
            };
            if new_base > tail.base_pos {
                let cut = usize::try_from(new_base - tail.base_pos).unwrap_or(usize::MAX);
                tail.buf.drop_front(cut);
                tail.base_pos = new_base;
            }
            if finalized && tail.flushed_pos == seg.meta.size_bytes {
                seg.tail = None;
            }
        }
        drop(guard);
        match outcome.error {
            None => Ok(self.durable()),
            Some((path, IoFault::NoSpace)) => {
                // Its user logs it (rate-limited): a full disk fails every retry of every flush.
                tracing::debug!(path = %path.display(), "disk full: flush failed, data kept pending");
                Err(StorageError::NoSpace { path })
            }
            Some((path, IoFault::Other(e))) => Err(self.fence(format!(
                "write or fdatasync of {} failed: {e}",
                path.display()
            ))),
        }
    }

    /// Appended data becomes durable: begin, run and complete one flush.
    pub async fn flush(&self) -> Result<Durable, StorageError> {
        match self.begin_flush()? {
            Some(job) => {
                let outcome = job.run().await;
                self.complete_flush(outcome)
            }
            None => Ok(self.durable()),
        }
    }
}

impl Durable {
    fn max(self, other: Durable) -> Durable {
        if self.last_index >= other.last_index {
            self
        } else {
            other
        }
    }
}

impl FlushJob {
    /// Performs the writes and fdatasyncs, segment by segment in log order, and stops at
    /// the first failure (later segments are not made durable before earlier ones).
    pub async fn run(self) -> FlushOutcome {
        let mut out = FlushOutcome {
            done: Vec::with_capacity(self.ops.len()),
            error: None,
            writes: 0,
            bytes_written: 0,
            fdatasyncs: 0,
        };
        for op in self.ops {
            let path = || crate::log::segment_path(&self.dir, &op.name);
            match run_op(&self.dir, &op, path, &mut out).await {
                Ok(r) => out.done.push(DoneOp {
                    key: op.name.raft_base_index,
                    file: r.file,
                    target_pos: op.target_pos,
                    preallocated_to: r.preallocated_to,
                    zeroed_to: r.zeroed_to,
                    zeros_to: r.zeros_to,
                    finalized: r.finalized,
                    last_index: op.last_index,
                    next_offset: op.next_offset,
                }),
                Err(fault) => {
                    out.error = Some((path(), fault));
                    break;
                }
            }
        }
        out
    }
}

async fn run_op(
    dir: &std::path::Path,
    op: &WriteOp,
    path: impl Fn() -> PathBuf,
    out: &mut FlushOutcome,
) -> Result<OpResult, IoFault> {
    let file = match &op.file {
        Some(f) => f.clone(),
        None => {
            let f = SegmentFile::create(&path(), WriteSync::Fdatasync)
                .await
                .map_err(fault_of)?;
            // The simulator's planted bug skips it (a crash may then forget the file).
            if !crate::io_sim::planted("no-dir-fsync") {
                io::fsync_dir_async(dir).await.map_err(fault_of)?;
            }
            Rc::new(f)
        }
    };
    let mut prealloc = 0;
    if let Some(to) = op.preallocate_to {
        match file.preallocate(to).await {
            Ok(()) => prealloc = to,
            // Preallocation only saves extent allocation later; the write itself decides.
            Err(e) => tracing::debug!(path = %path().display(), ?e, "preallocation failed"),
        }
    }
    // Zeros only into space this op's preallocation (if it had one) reserved: they must
    // not take the blocks a data write on a full disk needs.
    // And at most `ZERO_AHEAD_IN_FLIGHT_BYTES_MAX` of zeros in flight on this thread
    // (many partitions flushing at once skip it rather than hold that much memory).
    let zero = op
        .zero
        .filter(|_| op.preallocate_to.is_none() || prealloc > 0)
        .filter(|(from, to)| ZEROING_BYTES.get() + (to - from) <= ZERO_AHEAD_IN_FLIGHT_BYTES_MAX);
    let shared = joins_device_flush(op, &file);
    // The zeros go beside the data write (after its end); a failed zero write only leaves
    // those blocks unwritten.
    let data = async {
        let Some(bytes) = &op.data else {
            return Ok(0);
        };
        // A device flush about to begin waits for this write to join it.
        let _writing = shared.map(|_| crate::device_flush::begin_write());
        let _first = crate::budget::ForegroundWrite::begin();
        let len = bytes.write_len();
        // From the tail's memory as it is when one chunk holds it all (the usual case),
        // else copied into a DMA buffer.
        match bytes.in_place() {
            Some(src) => file.write_from(op.pos, src).await,
            None => file.write_filled(op.pos, len, |b| bytes.fill(b)).await,
        }
        .map(|()| len)
    };
    let (wrote, zeroed) = futures::join!(data, write_zeros(&file, zero, &path));
    let wrote = wrote? as u64;
    // The written blocks run on from the start: earlier flushes' (`op.zeros_to`), this
    // data write (from at most there), this piece of zeros (from the data's end on).
    let mut zeros_to = op.zeros_to.max(zeroed.unwrap_or(0));
    let mut zeroed_to = 0;
    if wrote > 0 {
        out.writes += 1;
        out.bytes_written += wrote;
        zeros_to = zeros_to.max(op.pos + wrote);
    }
    if wrote > 0 || zeroed.is_some() {
        make_durable(&file, shared, out).await?;
        // The file's own sync (or O_DSYNC) made every write completed before it durable,
        // zeros and their extents' conversion included; the shared device flush only
        // this data write, which was in durable blocks already.
        // The simulator's planted bug counts zeros as durable without that sync.
        if shared.is_none() || crate::io_sim::planted("zeros-durable-unsynced") {
            zeroed_to = zeros_to;
        }
    }
    let mut finalized = false;
    if let Some((size, index, time)) = &op.finalize {
        finalized = finalize(&file, &path(), *size, index, time).await;
    }
    Ok(OpResult {
        file,
        preallocated_to: prealloc,
        zeroed_to,
        zeros_to,
        finalized,
    })
}

/// Writes the piece of zeros `[from, to)`; its end when written (a failure only leaves
/// those blocks unwritten).
async fn write_zeros(
    file: &SegmentFile,
    zero: Option<(u64, u64)>,
    path: impl Fn() -> PathBuf,
) -> Option<u64> {
    let (from, to) = zero?;
    let len = usize::try_from(to - from).ok()?;
    ZEROING_BYTES.set(ZEROING_BYTES.get() + len as u64);
    let r = file.write_zeros(from, len).await;
    ZEROING_BYTES.set(ZEROING_BYTES.get() - len as u64);
    match r {
        Ok(()) => Some(to),
        Err(e) => {
            tracing::debug!(path = %path().display(), ?e, "zeroing ahead failed");
            None
        }
    }
}

/// What one op left: its file, and how far it is preallocated, written and durable, and
/// written (0: not changed by the op).
struct OpResult {
    file: SharedFile,
    preallocated_to: u64,
    zeroed_to: u64,
    zeros_to: u64,
    finalized: bool,
}

/// The device whose flush, shared by the shard's logs on it, is all that `op`'s data write
/// needs: so for an O_DIRECT write (a buffered one's pages would wait for their own file's
/// sync) that lands in blocks written and durable before (no extent to convert, no size
/// change: the file was preallocated past them) when nothing else of the op (a new file, a
/// preallocation, zeros written ahead to make durable: `commit`) needs the file synced;
/// `None` otherwise. A piece of zeros the op writes does not need it (it counts as durable
/// only after a later own sync).
fn joins_device_flush(op: &WriteOp, file: &SegmentFile) -> Option<u64> {
    op.flush_device.filter(|_| {
        file.sync_mode() == WriteSync::Fdatasync
            && op.file.is_some()
            && op.preallocate_to.is_none()
            && !op.commit
            && op.data.as_ref().is_some_and(|d| {
                op.pos + d.write_len() as u64 <= op.durable_to
                    || crate::io_sim::planted("shared-flush-anywhere")
            })
    })
}

/// Makes an op's completed writes durable: the shared device flush (the data write only),
/// or this file's own fdatasync (every completed write, zeros and their extents'
/// conversion included); a file opened `O_DSYNC` already is.
async fn make_durable(
    file: &SharedFile,
    shared: Option<u64>,
    out: &mut FlushOutcome,
) -> Result<(), IoFault> {
    if let Some(device) = shared {
        return crate::device_flush::after_write(file, device).await;
    }
    if file.sync_mode() == WriteSync::Fdatasync && !crate::io_sim::planted("drop-dsync") {
        file.fdatasync().await?;
        out.fdatasyncs += 1;
    }
    Ok(())
}

/// Trims a closed segment to its logical size and writes its index files. Best effort:
/// indexes are derived data and rebuilt at open when missing or stale.
async fn finalize(
    file: &SegmentFile,
    path: &std::path::Path,
    size: u64,
    index: &[u8],
    time: &[u8],
) -> bool {
    let result = async {
        file.truncate(size).await?;
        io::write_small_file_atomic_async(&path.with_extension("index"), index).await?;
        io::write_small_file_atomic_async(&path.with_extension("timeindex"), time).await
    }
    .await;
    if let Err(e) = &result {
        tracing::warn!(path = %path.display(), error = %e, "finalizing closed segment failed");
    }
    result.is_ok()
}

fn fault_of(e: StorageError) -> IoFault {
    match e {
        StorageError::Io { source, .. } => match source.raw_os_error() {
            Some(libc::ENOSPC) => IoFault::NoSpace,
            _ => IoFault::Other(source),
        },
        other => IoFault::Other(std::io::Error::other(other.to_string())),
    }
}
