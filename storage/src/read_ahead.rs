//! Read-ahead for sequential readers from disk. A read of a log by Kafka offset that went
//! to disk predicts where the next read will start (the segment position of the offset
//! after what it returned). When a read starts exactly there — a consumer going through
//! the log in order — the log begins reading the next window in the background as it
//! answers, so the consumer's next fetch finds its bytes read instead of waiting for the
//! disk.
//!
//! Invariants:
//! - Only durable bytes are read ahead (below the segment's tail buffer), of at most the
//!   window the read that started it used.
//! - A log holds at most one read-ahead; a shard holds at most
//!   `READ_AHEAD_SHARD_BYTES_MAX` bytes of them (the oldest is dropped first), kept in the
//!   shard's batch cache, which drops a log's read-ahead when the log goes.
//! - A read-ahead is used only by a read of its segment at exactly its position, only
//!   when it holds every byte asked for, and never after those bytes may have changed: a
//!   compaction swap makes it stale (`swaps`), suffix truncation and reset drop it.
//! - No byte is read from disk twice by a sequential reader: the whole frames of the last
//!   window past where the reader stopped are kept as the read-ahead's `leftover`, the
//!   disk read begins where they end, and the next read takes the leftover first (served
//!   only to a read starting exactly at it, under the same conditions as the read-ahead).
//!   Bytes a leftover keeps alive count in the shard's bound: the whole window it slices.
//! - On the simulated disk nothing is read ahead (its reads complete at once).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::cache::LogId;
use crate::io::{read_buffer_bytes, Prefetch};
use crate::types::RaftIndex;

/// Bytes of read-ahead a shard holds at most, over all its logs.
pub const READ_AHEAD_SHARD_BYTES_MAX: usize = 32 * 1024 * 1024;

/// A window being read, or read, ahead of a sequential reader.
pub(crate) struct Ahead {
    /// The segment (its first Raft index).
    pub(crate) key: RaftIndex,
    /// Where in the segment the window starts.
    pub(crate) pos: u64,
    /// Bytes asked of the disk.
    pub(crate) len: usize,
    /// The log's compaction swap count when it was begun.
    pub(crate) swaps: u64,
    /// The bytes, once read (the sender is dropped on a read error).
    pub(crate) bytes: Prefetch,
    /// Whole frames read already that end at `pos`, where the next read begins.
    pub(crate) leftover: Option<Leftover>,
}

/// Whole frames of a window read before, right in front of a read-ahead.
pub(crate) struct Leftover {
    /// Where in the segment they start.
    pub(crate) pos: u64,
    /// The frames (a slice of the window).
    pub(crate) bytes: Bytes,
    /// Bytes of the window they slice, which they keep in memory.
    pub(crate) window_bytes: usize,
}

impl Leftover {
    /// Bytes of memory it keeps: the buffer of the window it slices.
    fn held_bytes(&self) -> usize {
        read_buffer_bytes(self.window_bytes)
    }
}

impl Ahead {
    /// Bytes of memory it holds, or will once read (a read's buffer is of its size class,
    /// `io::read_buffer_bytes`).
    fn held_bytes(&self) -> usize {
        read_buffer_bytes(self.len) + self.leftover.as_ref().map_or(0, Leftover::held_bytes)
    }

    /// The first `len` bytes, once read; `None` after a read error or when fewer were read.
    pub(crate) async fn bytes(self, len: usize) -> Option<Bytes> {
        let bytes = self.bytes.await.ok()?;
        (bytes.len() >= len).then(|| bytes.slice(..len))
    }
}

/// The read-aheads of a shard's logs, oldest first.
#[derive(Default)]
pub(crate) struct ReadAheads {
    entries: VecDeque<(LogId, Ahead)>,
    /// Read-aheads begun, and read by the read they were for.
    pub(crate) begun: u64,
    pub(crate) used: u64,
}

impl ReadAheads {
    /// Keeps `a` as `log`'s read-ahead (replacing its previous one), dropping the oldest
    /// beyond the shard's bound.
    pub(crate) fn put(&mut self, log: LogId, a: Ahead) {
        self.remove(log);
        self.begun += 1;
        self.entries.push_back((log, a));
        self.keep_bound();
    }

    /// Drops the oldest read-aheads until the shard's bound holds.
    fn keep_bound(&mut self) {
        while self.bytes() > READ_AHEAD_SHARD_BYTES_MAX {
            if self.entries.pop_front().is_none() {
                break;
            }
        }
    }

    /// `log`'s read-ahead, when it reads segment `key` from `pos` and is not stale.
    fn current(&mut self, log: LogId, key: RaftIndex, swaps: u64) -> Option<&mut Ahead> {
        let (_, a) = self.entries.iter_mut().find(|(l, _)| *l == log)?;
        (a.key == key && a.swaps == swaps).then_some(a)
    }

    /// Whether `log` reads ahead segment `key` from exactly `pos` (not stale).
    pub(crate) fn reading_at(&mut self, log: LogId, key: RaftIndex, pos: u64, swaps: u64) -> bool {
        self.current(log, key, swaps).is_some_and(|a| a.pos == pos)
    }

    /// Gives `log`'s read-ahead the frames `leftover` in front of it (replacing any).
    pub(crate) fn set_leftover(&mut self, log: LogId, leftover: Option<Leftover>) {
        let Some((_, a)) = self.entries.iter_mut().find(|(l, _)| *l == log) else {
            return;
        };
        a.leftover = leftover;
        self.keep_bound();
    }

    /// The leftover frames of `log`'s read-ahead when a read of segment `key` starts
    /// exactly at them, made when the log had seen `swaps` compaction swaps; taken once.
    pub(crate) fn take_leftover(
        &mut self,
        log: LogId,
        key: RaftIndex,
        pos: u64,
        swaps: u64,
    ) -> Option<Leftover> {
        let a = self.current(log, key, swaps)?;
        if a.leftover.as_ref()?.pos != pos {
            return None;
        }
        a.leftover.take()
    }

    /// `log`'s read-ahead if it serves a read of `len` bytes of segment `key` at `pos`
    /// made when the log had seen `swaps` compaction swaps.
    pub(crate) fn take(
        &mut self,
        log: LogId,
        key: RaftIndex,
        pos: u64,
        len: usize,
        swaps: u64,
    ) -> Option<Ahead> {
        let k = self.entries.iter().position(|(l, _)| *l == log)?;
        let a = &self.entries[k].1;
        if a.key != key || a.pos != pos || a.len < len || a.swaps != swaps {
            return None;
        }
        let (_, a) = self.entries.remove(k)?;
        self.used += 1;
        Some(a)
    }

    /// Drops `log`'s read-ahead.
    pub(crate) fn remove(&mut self, log: LogId) {
        if let Some(k) = self.entries.iter().position(|(l, _)| *l == log) {
            self.entries.remove(k);
        }
    }

    /// Bytes of memory held, summed when asked (one entry per log read in order from
    /// disk; asked once per read-ahead begun).
    pub(crate) fn bytes(&self) -> usize {
        self.entries.iter().map(|(_, a)| a.held_bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ahead(key: u64, pos: u64, len: usize) -> (Ahead, futures::channel::oneshot::Sender<Bytes>) {
        let (tx, rx) = futures::channel::oneshot::channel();
        let a = Ahead {
            key: RaftIndex(key),
            pos,
            len,
            swaps: 0,
            bytes: rx,
            leftover: None,
        };
        (a, tx)
    }

    #[test]
    fn a_read_ahead_serves_only_the_read_it_was_begun_for() {
        let mut r = ReadAheads::default();
        let (a, _tx) = ahead(1, 4096, 1000);
        r.put(7, a);
        assert!(
            r.take(8, RaftIndex(1), 4096, 1000, 0).is_none(),
            "another log"
        );
        assert!(
            r.take(7, RaftIndex(2), 4096, 1000, 0).is_none(),
            "another segment"
        );
        assert!(
            r.take(7, RaftIndex(1), 4097, 10, 0).is_none(),
            "another position"
        );
        assert!(
            r.take(7, RaftIndex(1), 4096, 1001, 0).is_none(),
            "more than it read"
        );
        assert!(
            r.take(7, RaftIndex(1), 4096, 1000, 1).is_none(),
            "after a swap"
        );
        assert!(r.take(7, RaftIndex(1), 4096, 999, 0).is_some());
        assert!(
            r.take(7, RaftIndex(1), 4096, 999, 0).is_none(),
            "taken once"
        );
        assert_eq!(r.bytes(), 0);
        assert_eq!((r.begun, r.used), (1, 1));
    }

    #[test]
    fn a_leftover_serves_once_the_read_starting_at_it_and_counts_its_window() {
        let mut r = ReadAheads::default();
        let (mut a, _tx) = ahead(1, 4096, 8192);
        a.leftover = Some(Leftover {
            pos: 3000,
            bytes: Bytes::from(vec![7u8; 1096]),
            window_bytes: 10_000,
        });
        r.put(7, a);
        assert_eq!(r.bytes(), 8192 + 12_288, "the window's buffer: 4 KiB pages");
        assert!(r.reading_at(7, RaftIndex(1), 4096, 0));
        assert!(
            !r.reading_at(7, RaftIndex(1), 3000, 0),
            "the disk read is at 4096"
        );
        assert!(
            r.take_leftover(7, RaftIndex(1), 3001, 0).is_none(),
            "another position"
        );
        assert!(
            r.take_leftover(7, RaftIndex(2), 3000, 0).is_none(),
            "another segment"
        );
        assert!(
            r.take_leftover(7, RaftIndex(1), 3000, 1).is_none(),
            "after a swap"
        );
        assert!(
            r.take_leftover(8, RaftIndex(1), 3000, 0).is_none(),
            "another log"
        );
        assert_eq!(
            r.take_leftover(7, RaftIndex(1), 3000, 0)
                .map(|l| l.bytes.len()),
            Some(1096)
        );
        assert!(
            r.take_leftover(7, RaftIndex(1), 3000, 0).is_none(),
            "taken once"
        );
        assert_eq!(r.bytes(), 8192);
        // A later read that stopped inside a leftover gives the read-ahead a new one.
        r.set_leftover(
            7,
            Some(Leftover {
                pos: 3500,
                bytes: Bytes::from(vec![7u8; 596]),
                window_bytes: 4096,
            }),
        );
        assert_eq!(r.bytes(), 8192 + 4096);
        assert!(r.take(7, RaftIndex(1), 4096, 1000, 0).is_some());
        assert_eq!(r.bytes(), 0, "the leftover goes with its read-ahead");
        // A window of about 1 MiB is read into a buffer of the 2 MiB class, and counts so.
        let (a, _tx) = ahead(1, 0, 1_100_000);
        r.put(7, a);
        assert_eq!(r.bytes(), 2 << 20);
    }

    #[test]
    fn the_shard_bound_drops_the_oldest_and_a_log_keeps_one() {
        let mut r = ReadAheads::default();
        let window = READ_AHEAD_SHARD_BYTES_MAX / 4;
        let mut senders = Vec::new();
        for log in 0..6u64 {
            let (a, tx) = ahead(1, 0, window);
            senders.push(tx);
            r.put(log, a);
            assert!(r.bytes() <= READ_AHEAD_SHARD_BYTES_MAX);
        }
        assert!(r.take(0, RaftIndex(1), 0, 1, 0).is_none(), "oldest dropped");
        assert!(r.take(1, RaftIndex(1), 0, 1, 0).is_none(), "oldest dropped");
        let (a, _tx) = ahead(1, 8192, window);
        r.put(5, a);
        assert!(r.take(5, RaftIndex(1), 0, 1, 0).is_none(), "replaced");
        assert_eq!(r.bytes(), 4 * window);
        r.remove(5);
        assert_eq!(r.bytes(), 3 * window);
    }

    #[test]
    fn a_failed_or_short_read_serves_nothing() {
        use futures::FutureExt;
        let block_on = |f: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Bytes>>>>| {
            f.now_or_never()
                .expect("a sent or dropped receiver is ready")
        };
        let (a, tx) = ahead(1, 0, 100);
        drop(tx);
        assert!(block_on(Box::pin(a.bytes(10))).is_none(), "read error");
        let (a, tx) = ahead(1, 0, 100);
        tx.send(Bytes::from(vec![1u8; 50])).unwrap();
        assert!(block_on(Box::pin(a.bytes(60))).is_none(), "short");
        let (a, tx) = ahead(1, 0, 100);
        tx.send(Bytes::from(vec![1u8; 100])).unwrap();
        assert_eq!(block_on(Box::pin(a.bytes(60))).map(|b| b.len()), Some(60));
    }
}
