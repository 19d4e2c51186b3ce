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
//! completed (it joins the next round while one runs), of a file on the same device
//! (`st_dev`: a partition directory mounted from another disk gets rounds of its own)
//! whose write in that round completed too; a failed round fails every waiter of it.

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

/// A completed write waiting for a device flush: its file, the file's device, its slot.
struct Waiter {
    file: SharedFile,
    device: u64,
    slot: SlotRef,
}

#[derive(Default)]
struct Group {
    /// A round's fdatasync is running.
    in_flight: bool,
    /// Writes completed and waiting for the next round of their device.
    waiting: Vec<Waiter>,
    /// Rounds run on this thread.
    rounds: u64,
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
            take_wakers(&g)
        });
        wake_all(wake);
    }
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
    /// Per device, a file never written ([`SegmentFile::clean_anchor`]) whose `fdatasync`
    /// leads this thread's rounds: a log file with extent conversions pending (zeros
    /// written ahead, not yet synced) would make the round a journal commit.
    /// Held by the logs on that device (closed with the last of them).
    static ANCHORS: RefCell<Vec<(u64, std::rc::Weak<crate::io::SegmentFile>)>> =
        const { RefCell::new(Vec::new()) };
}

/// This thread's clean file for the rounds of `device`, made in `dir` (on that device)
/// when no log holds one; the caller (a log) keeps it open. `None` (the simulated disk, no
/// `O_TMPFILE`): rounds sync their first waiter's file.
pub async fn anchor(dir: &std::path::Path, device: u64) -> Option<SharedFile> {
    if let Some(f) = anchor_of(device) {
        return Some(f);
    }
    let f = Rc::new(crate::io::SegmentFile::clean_anchor(dir).await?);
    ANCHORS.with(|a| {
        let mut a = a.borrow_mut();
        a.retain(|(d, w)| *d != device && w.strong_count() > 0);
        a.push((device, Rc::downgrade(&f)));
    });
    Some(f)
}

fn anchor_of(device: u64) -> Option<SharedFile> {
    ANCHORS.with(|a| {
        a.borrow()
            .iter()
            .find(|(d, _)| *d == device)
            .and_then(|(_, f)| f.upgrade())
    })
}

/// Returns once the write just completed to `file`, on `device`, is durable: by the next
/// flush of that device this thread's logs share. Call only for a write into durably
/// written blocks of a file that does not grow (else the file needs its own fdatasync).
pub async fn after_write(file: &SharedFile, device: u64) -> Result<(), IoFault> {
    let slot: SlotRef = Rc::default();
    let awaited = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.waiting.push(Waiter {
            file: file.clone(),
            device,
            slot: slot.clone(),
        });
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
            // This device's waiters (this one among them); the others wait for a round
            // of their own.
            let (round, others) = std::mem::take(&mut g.waiting)
                .into_iter()
                .partition::<Vec<_>, _>(|w| w.device == device);
            g.waiting = others;
            g.in_flight = true;
            g.rounds += 1;
            g.joined += round.len() as u64;
            Some(round)
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

/// Writes made durable on this thread by another file's fdatasync so far: every waiter
/// of a round but the one whose file it synced (a round always holds its leader).
pub fn covered() -> u64 {
    GROUP.with(|g| {
        let g = g.borrow();
        g.joined - g.rounds
    })
}

/// One round: an fdatasync of the device's clean anchor (else of the first waiter's
/// file), then every waiter of the round is answered, and the tasks waiting for the next
/// round are woken (one of them leads it).
async fn run_round(round: Vec<Waiter>) {
    let mut guard = RoundGuard(Some(round));
    let first = guard
        .0
        .as_ref()
        .and_then(|r| r.first())
        .map(|w| anchor_of(w.device).unwrap_or_else(|| w.file.clone()));
    let result = match first {
        Some(file) => file.fdatasync().await,
        None => Ok(()),
    };
    let round = guard.0.take().unwrap_or_default();
    for w in round {
        let mut s = w.slot.borrow_mut();
        s.answer = Some(clone_result(&result));
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
    let next: Vec<Waker> = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.in_flight = false;
        take_wakers(&g)
    });
    wake_all(next);
}

/// The wakers of the tasks waiting for the next round (each woken once).
fn take_wakers(g: &Group) -> Vec<Waker> {
    g.waiting
        .iter()
        .filter_map(|w| w.slot.borrow_mut().waker.take())
        .collect()
}

/// Wakes `wakers`, outside the group's borrow (a woken task may poll at once).
fn wake_all(wakers: Vec<Waker>) {
    for w in wakers {
        w.wake();
    }
}

/// A running round's waiters until it is answered. If the leading task is dropped while
/// the round's fdatasync runs (the flush that led it was cancelled), they go back to the
/// waiting list and are woken, and the round no longer counts as running: one of them
/// leads the next, rather than every later flush of the shard waiting for ever.
struct RoundGuard(Option<Vec<Waiter>>);

impl Drop for RoundGuard {
    fn drop(&mut self) {
        let Some(round) = self.0.take() else {
            return;
        };
        let wake: Vec<Waker> = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            g.in_flight = false;
            let mut waiting = round;
            waiting.append(&mut g.waiting);
            g.waiting = waiting;
            take_wakers(&g)
        });
        wake_all(wake);
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::path::Path;
    use std::rc::Rc;
    use std::task::{Context, Poll};

    use super::*;
    use crate::io::{SegmentFile, WriteSync};
    use crate::io_sim::{block_on, DiskOptions, SimDisk};

    fn file(d: &SimDisk, name: &str) -> SharedFile {
        d.mkdir(Path::new("/d")).ok();
        let f = block_on(SegmentFile::create(
            &Path::new("/d").join(name),
            WriteSync::Fdatasync,
        ))
        .expect("create");
        Rc::new(f)
    }

    /// A simulated disk whose syncs yield once, so rounds overlap.
    fn slow_disk(seed: u64) -> SimDisk {
        SimDisk::new(
            seed,
            DiskOptions {
                slow_syncs: true,
                ..DiskOptions::default()
            },
        )
    }

    type Waiting<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), IoFault>> + 'a>>;

    /// Polls the waiters (ten turns) and says which were answered, each durably.
    fn answered(waiters: &mut [Waiting<'_>], cx: &mut Context<'_>) -> Vec<bool> {
        let mut done = vec![false; waiters.len()];
        for _ in 0..10 {
            for (w, d) in waiters.iter_mut().zip(&mut done) {
                if !*d {
                    if let Poll::Ready(r) = w.as_mut().poll(cx) {
                        r.expect("durable");
                        *d = true;
                    }
                }
            }
        }
        done
    }

    #[test]
    fn writes_waiting_while_a_round_runs_share_the_next_and_a_dropped_leader_hands_over() {
        let d = slow_disk(7);
        let _e = d.enter();
        let (a, b, c) = (file(&d, "a"), file(&d, "b"), file(&d, "c"));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let before = (rounds(), joined());
        // a leads a round; its fdatasync yields once (slow syncs).
        let mut fa = Box::pin(after_write(&a, 0));
        assert!(fa.as_mut().poll(&mut cx).is_pending());
        // b and c complete their writes meanwhile: they wait for the next round.
        let mut waiters: Vec<Waiting<'_>> =
            vec![Box::pin(after_write(&b, 0)), Box::pin(after_write(&c, 0))];
        for w in &mut waiters {
            assert!(w.as_mut().poll(&mut cx).is_pending());
        }
        // The leader is dropped in the middle of its round: the round is not lost.
        drop(fa);
        assert_eq!(
            answered(&mut waiters, &mut cx),
            [true, true],
            "b and c were answered"
        );
        // a's dropped round, then one round for a, b and c together.
        assert_eq!((rounds() - before.0, joined() - before.1), (2, 4));
    }

    #[test]
    fn a_round_answers_only_the_writes_on_its_own_device() {
        let d = slow_disk(8);
        let _e = d.enter();
        let (a, b, c) = (file(&d, "a"), file(&d, "b"), file(&d, "c"));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let before = (rounds(), joined());
        // a's round runs (device 1); b (device 2) and c (device 1) wait meanwhile.
        let mut waiters: Vec<Waiting<'_>> = vec![
            Box::pin(after_write(&a, 1)),
            Box::pin(after_write(&b, 2)),
            Box::pin(after_write(&c, 1)),
        ];
        for w in &mut waiters {
            assert!(w.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(answered(&mut waiters, &mut cx), [true; 3]);
        // a's round, then one for each device: b's cannot be answered by c's file's sync.
        assert_eq!((rounds() - before.0, joined() - before.1), (3, 3));
    }
}
