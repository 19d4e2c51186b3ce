//! Locked-memory planning and a single-threaded executor for storage users that are not
//! the broker's shard runtime (tools, benchmarks, tests). Names glommio (STYLE.md 1).
//!
//! glommio registers `io_memory` bytes of buffers with each of an executor's three
//! io_uring rings; without enough RLIMIT_MEMLOCK the registration fails and glommio only
//! logs a warning and degrades. We size `io_memory` to fit the limit instead, and refuse
//! to start with the fix in the message when even the minimum does not fit.

use std::future::Future;

use glommio::{LocalExecutorBuilder, Placement};

use crate::error::StorageError;

/// Smallest io_memory per executor worth running with (DMA buffers larger than the
/// registered pool fall back to ordinary aligned heap memory).
pub const IO_MEMORY_BYTES_MIN: usize = 256 * 1024;
/// Largest io_memory per executor we ask for; more brings nothing for our write sizes.
pub const IO_MEMORY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// glommio registers the buffer pool with this many rings per executor.
const RINGS_PER_EXECUTOR: u64 = 3;
/// glommio refuses to start below this RLIMIT_MEMLOCK.
pub const MEMLOCK_BYTES_MIN_GLOMMIO: u64 = 512 * 1024;

/// How much locked memory each executor may register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoMemoryPlan {
    /// The soft RLIMIT_MEMLOCK after trying to raise it to the hard limit.
    pub memlock_bytes: u64,
    /// io_memory for each executor.
    pub io_memory_bytes: usize,
}

/// Raises RLIMIT_MEMLOCK to its hard limit where allowed and sizes io_memory so that
/// `executors` executors fit in it (with a quarter left for everything else).
pub fn plan_io_memory(executors: usize) -> Result<IoMemoryPlan, StorageError> {
    let executors = u64::try_from(executors.max(1)).unwrap_or(u64::MAX);
    let memlock_bytes = raise_memlock();
    let fix = "raise it: `ulimit -l unlimited` in the starting shell, `LimitMEMLOCK=infinity` \
               in the systemd unit, or `* - memlock unlimited` in /etc/security/limits.conf";
    if memlock_bytes < MEMLOCK_BYTES_MIN_GLOMMIO {
        return Err(StorageError::Environment(format!(
            "RLIMIT_MEMLOCK is {memlock_bytes} bytes, io_uring needs at least \
             {MEMLOCK_BYTES_MIN_GLOMMIO}; {fix}"
        )));
    }
    let per_executor = memlock_bytes / executors / RINGS_PER_EXECUTOR * 3 / 4;
    let per_executor = usize::try_from(per_executor).unwrap_or(usize::MAX) & !4095;
    if per_executor < IO_MEMORY_BYTES_MIN {
        return Err(StorageError::Environment(format!(
            "RLIMIT_MEMLOCK is {memlock_bytes} bytes: too low for {executors} executors \
             (each needs {} bytes of locked memory); {fix}, or run fewer shards with --smp",
            IO_MEMORY_BYTES_MIN as u64 * RINGS_PER_EXECUTOR * 4 / 3
        )));
    }
    Ok(IoMemoryPlan {
        memlock_bytes,
        io_memory_bytes: per_executor.min(IO_MEMORY_BYTES_MAX),
    })
}

/// Raises the soft memlock limit to the hard one; returns the soft limit now in force.
fn raise_memlock() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into `lim`, a correctly sized out-parameter.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads only `raised`.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    lim.rlim_cur
}

/// Runs `fut` to completion on a new glommio executor on the current thread, with
/// io_memory planned for `executors_in_process` executors.
pub fn block_on<T>(
    name: &str,
    executors_in_process: usize,
    fut: impl Future<Output = T>,
) -> Result<T, StorageError> {
    let plan = plan_io_memory(executors_in_process)?;
    let ex = LocalExecutorBuilder::new(Placement::Unbound)
        .name(name)
        .io_memory(plan.io_memory_bytes)
        .make()
        .map_err(|e| {
            StorageError::Environment(format!(
                "cannot start an io_uring executor: {e}; check that io_uring is enabled \
                 (sysctl kernel.io_uring_disabled=0, no seccomp filter blocking it)"
            ))
        })?;
    Ok(ex.run(async {
        let out = fut.await;
        // glommio closes files dropped without an explicit close on its next I/O cycle;
        // give it one before the executor goes away, or their descriptors leak.
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        out
    }))
}

/// Runs `fut` to completion on this thread's reused executor (made at the first call):
/// for callers that run many short futures, such as a fuzz target, where making an
/// executor (io_uring rings, registered buffers) per run would cost more than the run.
/// Files dropped without a close are closed by the next run's I/O.
pub fn block_on_reused<T>(fut: impl Future<Output = T>) -> Result<T, StorageError> {
    thread_local! {
        static EXECUTOR: std::cell::OnceCell<glommio::LocalExecutor> =
            const { std::cell::OnceCell::new() };
    }
    EXECUTOR.with(|cell| {
        if cell.get().is_none() {
            let plan = plan_io_memory(1)?;
            let ex = LocalExecutorBuilder::new(Placement::Unbound)
                .name("reused")
                .io_memory(plan.io_memory_bytes)
                .make()
                .map_err(|e| {
                    StorageError::Environment(format!("cannot start an io_uring executor: {e}"))
                })?;
            let _ = cell.set(ex);
        }
        let ex = cell.get().ok_or(StorageError::Usage("executor not made"))?;
        Ok(ex.run(fut))
    })
}

/// Yields to other tasks on the executor.
pub async fn yield_now() {
    if crate::io_sim::SimDisk::current().is_some() {
        return;
    }
    glommio::yield_if_needed().await;
}

/// Sleeps on the executor's timer.
pub async fn sleep(d: std::time::Duration) {
    assert!(
        crate::io_sim::SimDisk::current().is_none(),
        "a timer on the simulated disk: simulated time has no sleep"
    );
    glommio::timer::sleep(d).await;
}
