//! One device cache flush for many logs' writes (issue 25: a shard's partitions flushed
//! together). A write that lands only in blocks already written and durable (no extent to
//! convert, no size change) is durable once the device's volatile write cache is flushed,
//! and an `fdatasync` of any file whose own write is still in that cache issues such a
//! flush (ext4: `blkdev_issue_flush` or the journal commit's PREFLUSH; XFS alike), which
//! by the block layer's contract makes every write completed before it durable. So the
//! logs of a shard that finished such writes join one `fdatasync` instead of each syncing
//! its own file: sixteen partitions cost one device flush, not sixteen (`strand-bench
//! physics`: 16 files p99 0.32-0.40 ms against 0.56-1.05 ms).
//!
//! Invariant: a waiter is answered only by an `fdatasync` that began after its write
//! completed (it joins the next round while one runs), of a file whose write in that
//! round completed too; a failed round fails every waiter of it.

use std::cell::RefCell;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::io::{IoFault, SharedFile};

/// A waiter's place: the answer of its round, and the task to wake.
#[derive(Default)]
struct Slot {
    answer: Option<Result<(), IoFault>>,
    waker: Option<Waker>,
}

type SlotRef = Rc<RefCell<Slot>>;

#[derive(Default)]
struct Group {
    /// A round's fdatasync is running.
    in_flight: bool,
    /// Writes completed and waiting for the next round, with their file.
    waiting: Vec<(SharedFile, SlotRef)>,
    /// Rounds run on this thread.
    rounds: u64,
    /// Writes made durable by another file's fdatasync (a round's waiters but its first).
    covered: u64,
    /// Writes made durable by rounds (every waiter of every round).
    joined: u64,
    /// Writes begun ([`begin_write`]) and ended so far: a round waits for the writes begun
    /// before its first waiter's ended, so that they join it rather than the next.
    begun: u64,
    ended: u64,
}

/// A write that will join the next device flush; ends when dropped.
pub struct Writing(());

/// Announces a write that will join the shard's device flush ([`after_write`]): a round
/// about to begin waits for it to end. End it (drop) when the write completes or fails.
pub fn begin_write() -> Writing {
    GROUP.with(|g| g.borrow_mut().begun += 1);
    Writing(())
}

impl Drop for Writing {
    fn drop(&mut self) {
        let wake: Vec<Waker> = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            g.ended += 1;
            if g.in_flight {
                return Vec::new();
            }
            // A waiter whose awaited writes have all ended may lead the next round.
            g.waiting
                .iter()
                .filter_map(|(_, s)| s.borrow_mut().waker.take())
                .collect()
        });
        for w in wake {
            w.wake();
        }
    }
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// Returns once the write just completed to `file` is durable: by the next device flush
/// this thread's logs share. Call only for a write into durably written blocks of a file
/// that does not grow (else the file needs its own fdatasync).
pub async fn after_write(file: &SharedFile) -> Result<(), IoFault> {
    let slot: SlotRef = Rc::default();
    let awaited = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.waiting.push((file.clone(), slot.clone()));
        g.begun
    });
    loop {
        if let Some(r) = slot.borrow_mut().answer.take() {
            return r;
        }
        let lead = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            // Not while a round runs, nor before the writes begun until this one ended
            // have ended too (they join this round).
            if g.in_flight || g.ended < awaited {
                return None;
            }
            g.in_flight = true;
            g.rounds += 1;
            g.covered += g.waiting.len().saturating_sub(1) as u64;
            g.joined += g.waiting.len() as u64;
            Some(std::mem::take(&mut g.waiting))
        });
        match lead {
            Some(round) => run_round(round).await,
            None => wait_for_round(&slot, awaited).await,
        }
    }
}

/// Device flushes (rounds) run on this thread so far.
pub fn rounds() -> u64 {
    GROUP.with(|g| g.borrow().rounds)
}

/// Writes made durable on this thread by rounds so far (each round's waiters).
pub fn joined() -> u64 {
    GROUP.with(|g| g.borrow().joined)
}

/// Writes made durable on this thread by another file's fdatasync so far.
pub fn covered() -> u64 {
    GROUP.with(|g| g.borrow().covered)
}

/// One round: an fdatasync of the first waiter's file, then every waiter of the round is
/// answered, and the tasks waiting for the next round are woken (one of them leads it).
async fn run_round(round: Vec<(SharedFile, SlotRef)>) {
    let result = match round.first() {
        Some((file, _)) => file.fdatasync().await,
        None => Ok(()),
    };
    for (_, slot) in round {
        let mut s = slot.borrow_mut();
        s.answer = Some(clone_result(&result));
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
    let next: Vec<Waker> = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.in_flight = false;
        g.waiting
            .iter()
            .filter_map(|(_, s)| s.borrow_mut().waker.take())
            .collect()
    });
    for w in next {
        w.wake();
    }
}

/// Waits until the slot is answered, or no round runs and the writes begun before
/// `awaited` ended (then the caller may lead one).
async fn wait_for_round(slot: &SlotRef, awaited: u64) {
    std::future::poll_fn(|cx| {
        let mut s = slot.borrow_mut();
        let may_lead = GROUP.with(|g| {
            let g = g.borrow();
            !g.in_flight && g.ended >= awaited
        });
        if s.answer.is_some() || may_lead {
            return Poll::Ready(());
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    })
    .await;
}

fn clone_result(r: &Result<(), IoFault>) -> Result<(), IoFault> {
    match r {
        Ok(()) => Ok(()),
        Err(IoFault::NoSpace) => Err(IoFault::NoSpace),
        Err(IoFault::Other(e)) => Err(IoFault::Other(std::io::Error::new(
            e.kind(),
            format!("device flush: {e}"),
        ))),
    }
}
