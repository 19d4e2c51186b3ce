//! glommio's foreign-wake path under the pattern every Kafka request of the broker follows
//! (issue 28): a request is a glommio task awaited by its connection's writer task; it makes
//! a cross-shard call, so the waker of its reply's `futures` oneshot is woken and dropped on
//! the other shard's thread while the writer, on the home shard, takes the task's output and
//! drops its handle.
//!
//! glommio 0.9.0 dropped a foreign waker by decrementing the task's reference count and, on
//! reaching zero, taking a new reference to send the waker home. Between the two, the count
//! read zero, and a `JoinHandle` dropped on the home thread in that window freed the task;
//! the home thread then woke the freed task (`RawTask::do_wake` read its header's notifier
//! pointer: `segfault at 30`, the crash of issue 28). Without the patch in
//! `third_party/glommio` (PATCHED.md) the second test below dies with SIGSEGV, or reports a
//! write into a freed task, within about a second on a 2-core machine (every run tried);
//! the first, the broker's own pattern, crashed one run in three. With the patch both run
//! their full time.
//!
//! `STRAND_WAKE_RACE_SECS` (default 4, per test) sets how long it runs; `make soak` runs it longer.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::channel::{mpsc, oneshot};
use futures::{SinkExt, StreamExt};
use glommio::channels::local_channel;
use glommio::{LocalExecutorBuilder, Placement};

/// Requests in flight per connection, as a pipelining Kafka client keeps them.
const PIPELINE_DEPTH: usize = 16;
/// Connections on the home shard.
const CONNECTIONS: usize = 4;

fn run_secs() -> u64 {
    std::env::var("STRAND_WAKE_RACE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

/// The tests run one at a time: each keeps both cores of a small machine busy, and the
/// spinning handshake of the second one starves when threads outnumber cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Spins until `done()`, yielding the CPU now and then so that a descheduled peer runs.
fn spin_until(mut done: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins += 1;
        if spins % 1024 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// One "connection" on the home shard: requests spawned as tasks, each a round trip to the
/// other shard, awaited in order by a writer task that drops each handle once answered.
async fn connection(remote: mpsc::Sender<oneshot::Sender<u64>>, until: Instant) -> u64 {
    let (tx, rx) = local_channel::new_bounded::<glommio::Task<u64>>(PIPELINE_DEPTH);
    let writer = glommio::spawn_local(async move {
        let mut answered = 0u64;
        let mut sum = 0u64;
        while let Some(task) = rx.recv().await {
            sum += task.await;
            answered += 1;
        }
        assert_eq!(sum, answered, "every reply carries 1");
        answered
    });
    let mut sent = 0u64;
    while Instant::now() < until {
        let mut remote = remote.clone();
        let task = glommio::spawn_local(async move {
            let (reply_tx, reply_rx) = oneshot::channel();
            if remote.send(reply_tx).await.is_err() {
                return 0;
            }
            // As `Shard::call` waits: the reply, or a peer check every 250 ms.
            let mut reply_rx = reply_rx;
            loop {
                let check = std::pin::pin!(glommio::timer::sleep(Duration::from_millis(250)));
                if let futures::future::Either::Left((r, _)) =
                    futures::future::select(&mut reply_rx, check).await
                {
                    return r.unwrap_or(0);
                }
            }
        });
        if tx.send(task).await.is_err() {
            break;
        }
        sent += 1;
    }
    drop(tx);
    let answered = writer.await;
    assert_eq!(answered, sent, "a request went unanswered");
    answered
}

/// Executors ("shards") in the ring, as many as the broker runs on a 2-core machine.
const SHARDS: usize = 2;

#[test]
fn requests_woken_from_another_shard_and_awaited_by_a_writer_never_use_a_freed_task() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let until = Instant::now() + Duration::from_secs(run_secs());
    // Shard i calls shard i + 1 (mod SHARDS) and serves shard i - 1, as broker shards call
    // each other for partitions they do not own.
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..SHARDS {
        let (tx, rx) = mpsc::channel::<oneshot::Sender<u64>>(1024);
        senders.push(tx);
        receivers.push(rx);
    }
    senders.rotate_left(1);
    let shards: Vec<_> = senders
        .into_iter()
        .zip(receivers)
        .enumerate()
        .map(|(i, (to_next, mut from_prev))| {
            LocalExecutorBuilder::new(Placement::Unbound)
                .name(&format!("shard-{i}"))
                .spawn(move || async move {
                    let server = glommio::spawn_local(async move {
                        let mut served = 0u64;
                        while let Some(reply) = from_prev.next().await {
                            let _ = reply.send(1);
                            served += 1;
                        }
                        served
                    });
                    let to_next = Rc::new(to_next);
                    let conns: Vec<_> = (0..CONNECTIONS)
                        .map(|_| glommio::spawn_local(connection((*to_next).clone(), until)))
                        .collect();
                    drop(to_next);
                    let mut answered = 0;
                    for c in conns {
                        answered += c.await;
                    }
                    // Serve the previous shard until its connections are done.
                    let served = server.await;
                    (answered, served)
                })
                .expect("start an executor")
        })
        .collect();
    let (mut answered, mut served) = (0, 0);
    for s in shards {
        let (a, b) = s.join().expect("executor");
        answered += a;
        served += b;
    }
    assert_eq!(answered, served, "every call was served once");
    assert!(
        answered > 10_000,
        "too few round trips to mean anything: {answered}"
    );
    eprintln!("{answered} cross-executor round trips");
}

/// The flaw itself, without channels around it: a task hands a clone of its waker to another
/// thread and finishes; the other thread drops that waker, the task's last reference, while
/// the home thread drops the task's handle. glommio 0.9.0 let the reference count read zero
/// in the middle of that foreign drop, so the handle freed the task under the other thread.
/// The two threads meet through spinning atomics (no sleeping, no system calls) and each
/// waits a varying few nanoseconds, so the two drops fall over each other every iteration.
/// What freed memory is filled with to catch writes into it.
const POISON: u8 = 0xAB;

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn a_last_waker_dropped_on_another_thread_while_the_handle_drops_never_frees_the_task_early() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    let until = Instant::now() + Duration::from_secs(run_secs());
    // The waker in flight, and the round: the home thread publishes round n (odd: a waker
    // is in the slot, drop it), the other thread answers n + 1 once it has dropped it.
    let slot: Arc<Mutex<Option<std::task::Waker>>> = Arc::default();
    let round = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // The last round whose waker the other thread has finished dropping.
    let dropped = Arc::new(AtomicU64::new(0));
    let dropped_home = dropped.clone();
    let dropper = {
        let (slot, round, done) = (slot.clone(), round.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen = 0u64;
            loop {
                let mut r = 0;
                spin_until(|| {
                    r = round.load(Ordering::Acquire);
                    (r != seen && r % 2 == 1) || done.load(Ordering::Acquire) != 0
                });
                if r == seen || r % 2 == 0 {
                    break;
                }
                let waker = slot.lock().expect("slot").take();
                // Tell the home thread the drop starts now, then drop.
                seen = r + 1;
                round.store(seen, Ordering::Release);
                drop(waker);
                dropped.store(seen, Ordering::Release);
            }
            seen / 2
        })
    };
    let home = LocalExecutorBuilder::new(Placement::Unbound)
        .name("home-shard")
        .spawn(move || async move {
            let mut lcg = 0x9e37_79b9_7f4a_7c15u64;
            let mut n = 0u64;
            while Instant::now() < until {
                let task_slot = slot.clone();
                let mut task = glommio::spawn_local(async move {
                    let waker =
                        futures::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone()))
                            .await;
                    *task_slot.lock().expect("slot") = Some(waker);
                });
                (&mut task).await;
                // The task has finished; its waker is now its only reference. Let the other
                // thread drop it, and drop the handle at about the same time.
                round.store(2 * n + 1, Ordering::Release);
                spin_until(|| round.load(Ordering::Acquire) == 2 * n + 2);
                lcg = lcg.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                for _ in 0..(lcg >> 60) {
                    std::hint::spin_loop();
                }
                drop(task);
                // Fill any memory freed just now with a pattern: if the handle freed the task
                // while the other thread still held it, the task's chunk is one of these, and
                // the other thread's reference-count write lands in it.
                let poison: Vec<Box<[u8]>> = (2..=64usize)
                    .map(|k| vec![POISON; k * 8].into_boxed_slice())
                    .collect();
                spin_until(|| dropped_home.load(Ordering::Acquire) == 2 * n + 2);
                let written = poison
                    .iter()
                    .filter(|b| b.iter().any(|&x| x != POISON))
                    .count();
                assert_eq!(
                    written, 0,
                    "round {n}: a freed task was written to after its handle dropped"
                );
                n += 1;
            }
            done.store(1, Ordering::Release);
            n
        })
        .expect("start the home executor");
    let finished = home.join().expect("home executor");
    let dropped = dropper.join().expect("dropper thread");
    assert_eq!(finished, dropped);
    assert!(
        finished > 10_000,
        "too few tasks to mean anything: {finished}"
    );
    eprintln!("{finished} tasks whose last waker was dropped on another thread");
}
