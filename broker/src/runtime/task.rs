//! Tasks and timers on the current shard: the three glommio calls every subsystem needs
//! (spawn, sleep, timeout), so that none of them names glommio (STYLE.md 1).
//!
//! Invariant: everything here runs on the calling shard's executor; nothing crosses threads.

use std::future::Future;
use std::time::Duration;

/// Spawns a task on the current shard.
pub fn spawn_local(fut: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(fut).detach();
}

/// Sleeps on the shard's timer.
pub async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await;
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
