//! Running storage code from a test or a child process: one glommio executor on the
//! calling thread (via `strand_storage::io_runtime`, so glommio stays out of this crate),
//! and opening a log with the real clock.

use std::future::Future;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use strand_storage::io_runtime::{self, block_on};
use strand_storage::{BatchCache, Log, LogConfig, StorageError, SystemClock};

/// Runs `fut` to completion on a new executor on this thread. Locked memory is planned for
/// one executor: each storage test binary here runs one test, so one executor at a time.
///
/// glommio closes a file dropped without an explicit close (as `Log`'s segments are) only in
/// its next I/O cycle; an executor that ends first leaks the descriptor until the process
/// exits (a busy mount, descriptors piling up over a soak). So `run` ends with one timer
/// wait, which is such a cycle.
pub fn run<T>(name: &str, fut: impl Future<Output = T>) -> T {
    let settled = async {
        let out = fut.await;
        io_runtime::sleep(SETTLE).await;
        out
    };
    block_on(name, 1, settled).unwrap_or_else(|e| panic!("cannot start the storage executor: {e}"))
}

/// The timer wait that ends [`run`]: any non-zero wait goes through the reactor.
const SETTLE: Duration = Duration::from_millis(1);

/// Opens the log in `dir` with a batch cache of `cache_bytes` (0: every read goes to disk).
pub async fn open_log(
    dir: &Path,
    config: LogConfig,
    cache_bytes: usize,
) -> Result<Log, StorageError> {
    Log::open(
        dir,
        config,
        Rc::new(SystemClock),
        Rc::new(BatchCache::new(cache_bytes)),
    )
    .await
}
