//! The CPUs this process may run on: its affinity mask (`sched_getaffinity`), never all
//! online CPUs (ARCHITECTURE.md, The shard runtime), so `taskset` and cgroup cpusets are
//! honoured and a shard is pinned only to a CPU it may use.

use anyhow::bail;

/// CPUs in this process's affinity mask (never all online CPUs).
pub fn affinity_cpus() -> anyhow::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, correctly sized cpu_set_t.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        bail!(
            "sched_getaffinity failed: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: CPU_ISSET reads the set initialised above.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    if cpus.is_empty() {
        bail!("empty CPU affinity mask");
    }
    Ok(cpus)
}
