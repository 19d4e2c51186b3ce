//! A wake-up lost on its way to a sleeping glommio executor costs the reactor's bounded
//! sleep, not the executor.
//!
//! A shard with nothing to do sleeps in `io_uring_enter` until a completion or a
//! notification from another thread (a foreign wake, a blocking-pool result) reaches its
//! ring. glommio 0.9.0 slept without a bound, so one lost notification left a shard asleep
//! for good when it had no timer armed: issue 21's CI run saw a broker that never opened its
//! listener (both shards asleep in `link_rings_and_sleep`, work ready), about once in a few
//! hundred starts under load here. The patched glommio (`third_party/glommio`, PATCHED.md)
//! sleeps at most 10 ms and counts each sleep that ran out and then found work ready.
//!
//! The test loses the notification on purpose (the patch's `lose_next_notify` hook) for an
//! executor with no timer at all; without the bound it never finishes (the deadline below
//! fails it), with the bound it finishes and the recovery is counted.
//! Its own test binary: the hook is process-wide.

use std::sync::mpsc;
use std::time::Duration;

use glommio::{LocalExecutorBuilder, Placement};

/// Far above the 10 ms bound plus scheduling noise on a loaded 2-core machine; only a
/// sleep without a bound reaches it.
const DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn a_wake_up_lost_on_its_way_to_a_sleeping_executor_is_recovered() {
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let (asleep_tx, asleep_rx) = mpsc::channel::<()>();
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .name("lost-wake")
        .spawn(move || async move {
            let _ = asleep_tx.send(());
            // No timer is armed on this executor: only the wake of `rx` can end the wait.
            rx.await.unwrap_or(0)
        })
        .expect("executor");
    asleep_rx.recv().expect("executor started");
    // Let it reach its sleep (it has nothing else to do).
    std::thread::sleep(Duration::from_millis(200));
    let before = glommio::recovered_wakeups();
    glommio::lose_next_notify();
    tx.send(7).expect("receiver waiting");

    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(executor.join());
    });
    let got = done_rx
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("the executor slept through a lost wake-up for {DEADLINE:?}"));
    assert_eq!(got.expect("executor ran"), 7);
    assert!(
        glommio::recovered_wakeups() > before,
        "the recovery was not counted"
    );
}
