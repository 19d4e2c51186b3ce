//! Tasks and timers on the current shard: the three glommio calls every subsystem needs
//! (spawn, sleep, timeout), so that none of them names glommio (STYLE.md 1).
//!
//! Invariant: everything here runs on the calling shard's executor; nothing crosses threads.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// The longest a shard runs tasks before it polls its rings again (glommio's preempt
/// timer; Seastar's default task quota). Network completions of the default task queue do
/// not preempt a running task: without this a task that keeps the CPU (a cleaner pass over
/// cached data, a large decompression) delays every request of the shard by up to
/// glommio's default of 100 ms. Tasks give the CPU back at their `yield_if_needed` points.
pub const TASK_QUOTA: Duration = Duration::from_micros(500);

/// CPU shares of the background task queue against the default queue's 1000: when both
/// have work, background tasks get about a tenth of the shard.
const BACKGROUND_SHARES: usize = 100;

/// Spawns a task on the current shard.
pub fn spawn_local(fut: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(fut).detach();
}

/// Spawns a task of background work (log compaction) on the current shard, in a task
/// queue of its own with `BACKGROUND_SHARES`: it runs at full speed on an idle shard and
/// yields to requests on a busy one (at its `yield_if_needed` points, every `TASK_QUOTA`).
/// A spawn glommio refuses (the queue just made is missing) is logged.
pub fn spawn_background(name: &str, fut: impl Future<Output = ()> + 'static) {
    let ex = glommio::executor();
    let queue = ex.create_task_queue(
        glommio::Shares::Static(BACKGROUND_SHARES),
        glommio::Latency::NotImportant,
        name,
    );
    match glommio::spawn_local_into(fut, queue) {
        Ok(t) => {
            t.detach();
        }
        Err(e) => tracing::error!(error = %e, task = name, "cannot spawn a background task"),
    };
}

/// Sleeps on the shard's timer.
pub async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await;
}

/// Awaits `fut`, polling it again every `every` even when nothing wakes it, so that a wake
/// lost on its way (from another shard's thread, or from the reactor) costs at most `every`
/// instead of the task; `give_up` is asked at each of those polls whether to stop waiting
/// (then `None`). Returns the output and whether it was found ready by such a timed poll
/// with no wake having reached `fut`'s waker since it last returned pending: a lost wake.
pub async fn repoll<T>(
    every: Duration,
    fut: impl Future<Output = T>,
    mut give_up: impl FnMut() -> bool,
) -> Option<(T, bool)> {
    let mut fut = std::pin::pin!(fut);
    let mut flag: Option<(Arc<FlagWaker>, Waker)> = None;
    loop {
        let mut timer = std::pin::pin!(glommio::timer::sleep(every));
        let polled = std::future::poll_fn(|cx| {
            let expired = timer.as_mut().poll(cx).is_ready();
            // `fut` gets a waker that notes its wakes and passes them on to this task.
            if flag
                .as_ref()
                .is_none_or(|(f, _)| !f.inner.will_wake(cx.waker()))
            {
                let f = Arc::new(FlagWaker {
                    woken: AtomicBool::new(false),
                    inner: cx.waker().clone(),
                });
                flag = Some((f.clone(), Waker::from(f)));
            }
            let Some((f, waker)) = flag.as_ref() else {
                return Poll::Pending;
            };
            let woken = f.woken.swap(false, Ordering::AcqRel);
            match fut.as_mut().poll(&mut Context::from_waker(waker)) {
                Poll::Ready(v) => Poll::Ready(Some((v, expired && !woken))),
                Poll::Pending if expired => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        match polled {
            Some(done) => return Some(done),
            None if give_up() => return None,
            None => {}
        }
    }
}

/// The waker `repoll` gives the future it watches: notes that a wake arrived, then wakes
/// the task. Wakes may come from any thread.
struct FlagWaker {
    woken: AtomicBool,
    inner: Waker,
}

impl Wake for FlagWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.inner.wake_by_ref();
    }
}

/// Runs `fut` to its end: its output and the time spent inside its polls (the thread
/// time it took on this shard, without the waits between them).
pub async fn timed_polls<F: Future>(fut: F) -> (F::Output, Duration) {
    let mut fut = std::pin::pin!(fut);
    let mut spent = Duration::ZERO;
    let out = std::future::poll_fn(|cx| {
        let start = crate::common::clock::now();
        let polled = fut.as_mut().poll(cx);
        spent += crate::common::clock::now().saturating_duration_since(start);
        polled
    })
    .await;
    (out, spent)
}

/// Runs `fut` for at most `d`.
pub async fn timeout<T>(d: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let fut = std::pin::pin!(fut);
    let timer = std::pin::pin!(glommio::timer::sleep(d));
    match futures::future::select(fut, timer).await {
        futures::future::Either::Left((v, _)) => Some(v),
        futures::future::Either::Right(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// Ready once `flag` is set; never registers a waker (a wake that is always lost).
    struct NeverWakes(Rc<Cell<bool>>);

    impl Future for NeverWakes {
        type Output = u8;
        fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<u8> {
            if self.0.get() {
                Poll::Ready(7)
            } else {
                Poll::Pending
            }
        }
    }

    #[test]
    fn a_future_whose_wake_is_lost_is_found_by_the_timed_poll() {
        strand_storage::io_runtime::block_on("repoll-test", 1, async {
            let ready = Rc::new(Cell::new(false));
            let r = ready.clone();
            spawn_local(async move {
                sleep(Duration::from_millis(20)).await;
                r.set(true);
            });
            let got = repoll(Duration::from_millis(5), NeverWakes(ready), || false).await;
            assert_eq!(got, Some((7, true)));
            // Woken normally: not counted as a lost wake.
            let got = repoll(
                Duration::from_secs(5),
                sleep(Duration::from_millis(1)),
                || false,
            );
            assert_eq!(got.await, Some(((), false)));
            // Given up at the first timed poll.
            let never = NeverWakes(Rc::new(Cell::new(false)));
            assert_eq!(repoll(Duration::from_millis(1), never, || true).await, None);
        })
        .expect("runtime");
    }
}
