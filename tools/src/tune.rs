//! `strandctl tune check|apply`: the host settings Strand's design relies on (issue 8):
//! CPU frequency governor, `fs.aio-max-nr`, `kernel.io_uring_disabled`, RLIMIT_MEMLOCK,
//! the data directory's block I/O scheduler, transparent hugepages, IRQ/CPU isolation, and
//! how many shards to run on a machine of few CPUs, and group commit pacing on a virtual
//! machine (issue 30).
//!
//! Invariant: `check` never writes. Reading is split from deciding: the `*_row` functions
//! are pure (file contents in, [`Row`] out) and a missing or unreadable file gives
//! status UNKNOWN, never an error. `apply` writes only rows with a runtime [`Fix`], only
//! as root, and only after a yes per change (or `--yes`); memlock and CPU isolation are
//! boot/service settings and stay advice.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// `fs.aio-max-nr` floor: glommio sizes its rings per shard; Redpanda's tuner sets 1 Mi.
pub const AIO_MAX_NR_MIN: u64 = 1_048_576;
/// RLIMIT_MEMLOCK floor: io_uring rings and registered buffers are locked memory.
pub const MEMLOCK_BYTES_MIN: u64 = 64 * 1024 * 1024;

/// A row's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// As recommended.
    Ok,
    /// Should change.
    Change,
    /// Could not be read (not a problem by itself).
    Unknown,
    /// A recommendation without a single right value.
    Advice,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Change => "CHANGE",
            Status::Unknown => "UNKNOWN",
            Status::Advice => "ADVICE",
        }
    }
}

/// A runtime change: write `value` to each file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    /// Files to write.
    pub paths: Vec<PathBuf>,
    /// What to write.
    pub value: String,
    /// How to make it survive a reboot.
    pub persist: String,
}

/// One setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Name.
    pub setting: String,
    /// Current value.
    pub current: String,
    /// Recommended value.
    pub recommended: String,
    /// Why it matters.
    pub why: String,
    /// Verdict.
    pub status: Status,
    /// How `apply` changes it (`None`: advice only).
    pub fix: Option<Fix>,
}

fn row(setting: &str, current: String, recommended: &str, why: &str, status: Status) -> Row {
    Row {
        setting: setting.into(),
        current,
        recommended: recommended.into(),
        why: why.into(),
        status,
        fix: None,
    }
}

/// The bracketed choice of a sysfs selector (`always [madvise] never` → `madvise`).
pub fn selected(text: &str) -> Option<&str> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(&text[start + 1..end])
}

/// CPU governors: (path, contents) per CPU.
pub fn governor_row(cpus: &[(PathBuf, Option<String>)]) -> Row {
    let why = "frequency scaling adds wake-up latency to a thread-per-core reactor";
    let values: Vec<&str> = cpus
        .iter()
        .filter_map(|(_, v)| v.as_deref().map(str::trim))
        .collect();
    if values.is_empty() {
        return row(
            "cpu governor",
            "no cpufreq (VM or fixed clock)".into(),
            "performance",
            why,
            Status::Unknown,
        );
    }
    let mut distinct: Vec<&str> = values.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let ok = distinct == ["performance"];
    let mut r = row(
        "cpu governor",
        distinct.join(","),
        "performance",
        why,
        if ok { Status::Ok } else { Status::Change },
    );
    if !ok {
        r.fix = Some(Fix {
            paths: cpus
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|(p, _)| p.clone())
                .collect(),
            value: "performance".into(),
            persist: "cpupower frequency-set -g performance (e.g. in a systemd unit)".into(),
        });
    }
    r
}

/// `fs.aio-max-nr`.
pub fn aio_max_nr_row(text: Option<&str>) -> Row {
    let why = "Linux AIO/io_uring contexts per host; too few and shards fail to start";
    let rec = format!(">= {AIO_MAX_NR_MIN}");
    let Some(n) = text.and_then(|t| t.trim().parse::<u64>().ok()) else {
        return row(
            "fs.aio-max-nr",
            "unreadable".into(),
            &rec,
            why,
            Status::Unknown,
        );
    };
    let ok = n >= AIO_MAX_NR_MIN;
    let mut r = row(
        "fs.aio-max-nr",
        n.to_string(),
        &rec,
        why,
        if ok { Status::Ok } else { Status::Change },
    );
    if !ok {
        r.fix = Some(Fix {
            paths: vec!["/proc/sys/fs/aio-max-nr".into()],
            value: AIO_MAX_NR_MIN.to_string(),
            persist: format!(
                "echo 'fs.aio-max-nr = {AIO_MAX_NR_MIN}' > /etc/sysctl.d/60-strand.conf"
            ),
        });
    }
    r
}

/// `kernel.io_uring_disabled` (absent before Linux 6.6: io_uring is then enabled).
pub fn io_uring_row(text: Option<&str>) -> Row {
    let why = "strand's storage and network I/O run on io_uring";
    let Some(t) = text else {
        return row(
            "kernel.io_uring_disabled",
            "absent (kernel < 6.6: enabled)".into(),
            "0",
            why,
            Status::Ok,
        );
    };
    let v = t.trim();
    let ok = v == "0";
    let mut r = row(
        "kernel.io_uring_disabled",
        v.into(),
        "0",
        why,
        if ok { Status::Ok } else { Status::Change },
    );
    if !ok {
        r.fix = Some(Fix {
            paths: vec!["/proc/sys/kernel/io_uring_disabled".into()],
            value: "0".into(),
            persist: "echo 'kernel.io_uring_disabled = 0' > /etc/sysctl.d/60-strand.conf".into(),
        });
    }
    r
}

/// RLIMIT_MEMLOCK soft limit from `/proc/self/limits` text.
pub fn memlock_row(limits: Option<&str>) -> Row {
    let why = "io_uring rings and buffers are locked memory; set LimitMEMLOCK=infinity in the \
               systemd unit (deploy/strand.service) or `ulimit -l` (advice only)";
    let rec = "unlimited (>= 64 MiB)";
    let soft = limits.and_then(|l| {
        l.lines()
            .find(|line| line.starts_with("Max locked memory"))
            .and_then(|line| line["Max locked memory".len()..].split_whitespace().next())
            .map(str::to_string)
    });
    match soft.as_deref() {
        None => row(
            "RLIMIT_MEMLOCK",
            "unreadable".into(),
            rec,
            why,
            Status::Unknown,
        ),
        Some("unlimited") => row("RLIMIT_MEMLOCK", "unlimited".into(), rec, why, Status::Ok),
        Some(n) => match n.parse::<u64>() {
            Ok(b) => row(
                "RLIMIT_MEMLOCK",
                format!("{} KiB", b / 1024),
                rec,
                why,
                if b >= MEMLOCK_BYTES_MIN {
                    Status::Ok
                } else {
                    Status::Change
                },
            ),
            Err(_) => row("RLIMIT_MEMLOCK", n.into(), rec, why, Status::Unknown),
        },
    }
}

/// The data directory's block device scheduler: device name and `queue/scheduler` text.
pub fn scheduler_row(
    device: Option<&str>,
    scheduler_path: Option<PathBuf>,
    text: Option<&str>,
) -> Row {
    let why = "NVMe queues need no kernel reordering; a scheduler only adds latency";
    let (Some(dev), Some(path), Some(text)) = (device, scheduler_path, text) else {
        return row(
            "io scheduler",
            "data dir not on a block device (tmpfs/overlay?) or no sysfs".into(),
            "none",
            why,
            Status::Unknown,
        );
    };
    let current = selected(text).unwrap_or(text.trim()).to_string();
    let nvme = dev.starts_with("nvme");
    let ok = current == "none" || (!nvme && current == "mq-deadline");
    let rec = if nvme {
        "none"
    } else {
        "none (or mq-deadline)"
    };
    let mut r = row(
        &format!("io scheduler ({dev})"),
        current,
        rec,
        why,
        if ok { Status::Ok } else { Status::Change },
    );
    if !ok && text.contains("none") {
        r.fix = Some(Fix {
            paths: vec![path],
            value: "none".into(),
            persist: format!(
                "a udev rule: ACTION==\"add|change\", KERNEL==\"{dev}\", ATTR{{queue/scheduler}}=\"none\""
            ),
        });
    }
    r
}

/// Transparent hugepages `enabled` selector.
pub fn thp_row(text: Option<&str>) -> Row {
    let why = "THP `always` causes compaction stalls in the allocator on the hot path";
    let Some(cur) = text.and_then(selected) else {
        return row(
            "transparent hugepages",
            "unreadable".into(),
            "madvise or never",
            why,
            Status::Unknown,
        );
    };
    let ok = cur == "madvise" || cur == "never";
    let mut r = row(
        "transparent hugepages",
        cur.into(),
        "madvise or never",
        why,
        if ok { Status::Ok } else { Status::Change },
    );
    if !ok {
        r.fix = Some(Fix {
            paths: vec!["/sys/kernel/mm/transparent_hugepage/enabled".into()],
            value: "madvise".into(),
            persist: "kernel command line transparent_hugepage=madvise".into(),
        });
    }
    r
}

/// IRQ and CPU isolation advice from the kernel command line and irqbalance's presence.
pub fn isolation_row(cmdline: Option<&str>, irqbalance: bool) -> Row {
    let isolcpus = cmdline.and_then(|c| c.split_whitespace().find(|w| w.starts_with("isolcpus=")));
    let current = format!(
        "{}, irqbalance {}",
        isolcpus.unwrap_or("no isolcpus"),
        if irqbalance { "present" } else { "absent" }
    );
    let why = "on a dedicated host, keep interrupts off strand's cores: isolcpus=/nohz_full= \
               on the kernel command line, irqbalance --banirq or IRQ affinity to the other \
               cores, and strand --smp / taskset for the rest (advice only: needs a reboot)";
    row(
        "irq/cpu isolation",
        current,
        "isolated strand cores",
        why,
        Status::Advice,
    )
}

/// Machines with at most this many CPUs should leave one to the clients and interrupts.
pub const SMALL_MACHINE_CPUS: usize = 4;

/// How many shards to run on `cpus` CPUs: a shard per CPU leaves a small machine's Kafka
/// clients and interrupts no CPU of their own (issue 30: on 2 vCPUs the load generator fell
/// 55 ms behind at p99.9 with two shards).
pub fn shards_row(cpus: usize) -> Row {
    let current = format!("{cpus} CPUs: strand runs {cpus} shards by default");
    if cpus <= 1 || cpus > SMALL_MACHINE_CPUS {
        return row(
            "shards",
            current,
            "a shard per CPU",
            "strand pins a shard to each CPU of its affinity mask (--smp to run fewer)",
            Status::Ok,
        );
    }
    let list = if cpus == 2 {
        "1".to_string()
    } else {
        format!("1-{}", cpus - 1)
    };
    let recommended = format!("taskset -c {list} strand --smp {}", cpus - 1);
    row(
        "shards",
        current,
        &recommended,
        "on a machine of few CPUs leave CPU 0 to the clients, the network and disk \
         interrupts: their delays become the broker's tail latency (bench/README.md, Light \
         load)",
        Status::Advice,
    )
}

/// The group commit pacing to suggest on a virtual machine (bench/README.md, Light load).
pub const VM_GROUP_COMMIT_MIN_INTERVAL_US: u64 = 500;

/// Group commit pacing from `/proc/cpuinfo` (the `hypervisor` flag) and `/proc/stat` (steal
/// time since boot). On a virtual machine the host may take CPU from the guest when the
/// guest's I/O rate is high (measured on a 2-vCPU VM: above ~3,500 syncs/s every vCPU lost
/// 6-13 ms at a time), so a busy partition's many small flushes cost every thread its tail.
pub fn pacing_row(cpuinfo: Option<&str>, stat: Option<&str>) -> Row {
    let Some(cpuinfo) = cpuinfo else {
        return row(
            "group commit pacing",
            "unknown".into(),
            "0 on bare metal",
            "/proc/cpuinfo unreadable",
            Status::Unknown,
        );
    };
    let virtual_machine = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "hypervisor"));
    let steal = stat
        .and_then(|s| s.lines().find(|l| l.starts_with("cpu ")))
        .and_then(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let total: u64 = v.iter().take(8).sum();
            (total > 0).then(|| v.get(7).copied().unwrap_or(0) as f64 * 100.0 / total as f64)
        });
    let steal_text = steal.map_or("steal unknown".into(), |p| {
        format!("steal {p:.2}% since boot")
    });
    if !virtual_machine {
        return row(
            "group commit pacing",
            format!("bare metal, {steal_text}"),
            "group_commit_min_interval_us = 0",
            "a flush starts as soon as the previous one ends (lowest latency)",
            Status::Ok,
        );
    }
    row(
        "group commit pacing",
        format!("virtual machine, {steal_text}"),
        &format!("group_commit_min_interval_us = {VM_GROUP_COMMIT_MIN_INTERVAL_US} if steal grows with load"),
        "a host may take CPU from its guests above a few thousand I/Os per second: watch \
         steal (top's `st`) while strand-bench light runs; if it grows, pacing each \
         partition's flushes trades a fraction of a millisecond at the median for \
         milliseconds at p99 (bench/README.md, Light load)",
        Status::Advice,
    )
}

/// Kernel memory monitors (DAMON) from the `state` of each kdamond in sysfs and the
/// `enabled` parameter of the DAMON modules: `(path, contents)`. A kdamond is a kernel
/// thread that wakes on any CPU and runs for milliseconds (issue 30: on a 2-vCPU VM one ran
/// 1.2-3.8 ms at a time on the load generator's CPU, the light load's p99.9).
pub fn damon_row(states: &[(PathBuf, String)]) -> Row {
    let on: Vec<&PathBuf> = states
        .iter()
        .filter(|(_, v)| matches!(v.trim(), "on" | "Y"))
        .map(|(p, _)| p)
        .collect();
    if on.is_empty() {
        return row(
            "kernel memory monitor",
            "no DAMON kdamond running".into(),
            "none running",
            "DAMON's kdamond threads take a CPU for milliseconds at a time",
            Status::Ok,
        );
    }
    let current = on
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    row(
        "kernel memory monitor",
        format!("DAMON running ({current})"),
        "off, or away from strand's and its clients' CPUs",
        "a kdamond thread runs for milliseconds at a time on any CPU, and a request or a \
         client it lands on waits that long (perf sched timehist shows it); if nothing on \
         this host relies on it, write `off` to the kdamond's state (`N` to a module's \
         enabled), else keep it off the latency-critical CPUs with taskset",
        Status::Advice,
    )
}

/// The DAMON switches `damon_row` reads.
fn damon_states() -> Vec<(PathBuf, String)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir("/sys/kernel/mm/damon/admin/kdamonds")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("state"))
        .collect();
    for module in ["damon_reclaim", "damon_lru_sort", "damon_stat"] {
        paths.push(
            Path::new("/sys/module")
                .join(module)
                .join("parameters/enabled"),
        );
    }
    paths
        .into_iter()
        .filter_map(|p| read(&p).map(|v| (p, v)))
        .collect()
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `(major, minor)` of a glibc `dev_t`.
pub fn dev_major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// The block device holding `dir` and its `queue/scheduler` path (a partition's is its disk's).
fn block_device(dir: &Path) -> Option<(String, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let (major, minor) = dev_major_minor(std::fs::metadata(dir).ok()?.dev());
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    for d in [sys.clone(), sys.parent()?.to_path_buf()] {
        let sched = d.join("queue/scheduler");
        if sched.exists() {
            let name = d.file_name()?.to_string_lossy().into_owned();
            return Some((name, sched));
        }
    }
    None
}

fn cpu_governors() -> Vec<(PathBuf, Option<String>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            let p = e.path().join("cpufreq/scaling_governor");
            let v = read(&p);
            if v.is_some() {
                out.push((p, v));
            }
        }
    }
    out.sort();
    out
}

fn irqbalance_present() -> bool {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("irqbalance").exists()));
    on_path || Path::new("/usr/sbin/irqbalance").exists()
}

/// Reads the host and returns every row.
pub fn collect(data_dir: &Path) -> Vec<Row> {
    let dev = block_device(data_dir);
    let sched_text = dev.as_ref().and_then(|(_, p)| read(p));
    vec![
        governor_row(&cpu_governors()),
        aio_max_nr_row(read(Path::new("/proc/sys/fs/aio-max-nr")).as_deref()),
        io_uring_row(read(Path::new("/proc/sys/kernel/io_uring_disabled")).as_deref()),
        memlock_row(read(Path::new("/proc/self/limits")).as_deref()),
        scheduler_row(
            dev.as_ref().map(|(n, _)| n.as_str()),
            dev.as_ref().map(|(_, p)| p.clone()),
            sched_text.as_deref(),
        ),
        thp_row(read(Path::new("/sys/kernel/mm/transparent_hugepage/enabled")).as_deref()),
        isolation_row(
            read(Path::new("/proc/cmdline")).as_deref(),
            irqbalance_present(),
        ),
        shards_row(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)),
        pacing_row(
            read(Path::new("/proc/cpuinfo")).as_deref(),
            read(Path::new("/proc/stat")).as_deref(),
        ),
        damon_row(&damon_states()),
    ]
}

/// The rows as a table plus the reasons (pure).
pub fn render(rows: &[Row]) -> String {
    let mut t = crate::output::Table::new(&["SETTING", "CURRENT", "RECOMMENDED", "STATUS"]);
    for r in rows {
        t.row(vec![
            r.setting.clone(),
            r.current.clone(),
            r.recommended.clone(),
            r.status.name().into(),
        ]);
    }
    let mut out = t.render();
    out.push('\n');
    for r in rows {
        out.push_str(&format!("{}: {}\n", r.setting, r.why));
    }
    out
}

/// Whether `/proc/self/status` says the effective uid is 0.
pub fn is_root(status: Option<&str>) -> bool {
    status
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

/// `tune apply`: returns the report; `Ok(false)` in the tuple when changes remain.
pub fn apply(rows: &[Row], yes: bool, out: &mut dyn Write) -> anyhow::Result<bool> {
    let changes: Vec<&Row> = rows.iter().filter(|r| r.status == Status::Change).collect();
    if changes.is_empty() {
        writeln!(out, "nothing to change")?;
        return Ok(true);
    }
    let root = is_root(read(Path::new("/proc/self/status")).as_deref());
    let interactive = std::io::stdin().is_terminal();
    if !yes && !interactive {
        anyhow::bail!(
            "stdin is not a terminal, so strandctl cannot ask: pass --yes to apply every change"
        );
    }
    let mut all_done = true;
    for r in changes {
        let Some(fix) = &r.fix else {
            writeln!(
                out,
                "{}: advice only, not applied at runtime: {}",
                r.setting, r.why
            )?;
            all_done = false;
            continue;
        };
        if !root {
            writeln!(
                out,
                "{}: needs root — run `sudo strandctl tune apply`, or: echo {} | sudo tee {}",
                r.setting,
                fix.value,
                fix.paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )?;
            all_done = false;
            continue;
        }
        if !yes
            && !ask(&format!(
                "{}: {} -> {}? [y/N] ",
                r.setting, r.current, fix.value
            ))?
        {
            writeln!(out, "{}: skipped", r.setting)?;
            all_done = false;
            continue;
        }
        for p in &fix.paths {
            if let Err(e) = std::fs::write(p, &fix.value) {
                writeln!(out, "{}: writing {} failed: {e}", r.setting, p.display())?;
                all_done = false;
            }
        }
        writeln!(
            out,
            "{}: set to {} (until reboot; to persist: {})",
            r.setting, fix.value, fix.persist
        )?;
    }
    Ok(all_done)
}

fn ask(prompt: &str) -> anyhow::Result<bool> {
    eprint!("{prompt}");
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_simple_rows() {
        assert_eq!(selected("always [madvise] never\n"), Some("madvise"));
        assert_eq!(selected("none"), None);
        assert_eq!(
            thp_row(Some("[always] madvise never")).status,
            Status::Change
        );
        assert_eq!(thp_row(Some("always madvise [never]")).status, Status::Ok);
        assert_eq!(thp_row(None).status, Status::Unknown);
        assert_eq!(aio_max_nr_row(Some("65536\n")).status, Status::Change);
        assert_eq!(aio_max_nr_row(Some("1048576\n")).status, Status::Ok);
        assert_eq!(aio_max_nr_row(Some("x")).status, Status::Unknown);
        assert_eq!(io_uring_row(None).status, Status::Ok);
        assert_eq!(io_uring_row(Some("2\n")).status, Status::Change);
        assert_eq!(io_uring_row(Some("0\n")).status, Status::Ok);
    }

    #[test]
    fn memlock_parses_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max locked memory         8388608              8388608              bytes\n";
        let r = memlock_row(Some(limits));
        assert_eq!((r.status, r.current.as_str()), (Status::Change, "8192 KiB"));
        assert!(r.fix.is_none(), "memlock is advice only");
        let unl = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(memlock_row(Some(unl)).status, Status::Ok);
        assert_eq!(memlock_row(None).status, Status::Unknown);
    }

    #[test]
    fn scheduler_and_governor() {
        let p = Some(PathBuf::from("/sys/block/nvme0n1/queue/scheduler"));
        let r = scheduler_row(Some("nvme0n1"), p.clone(), Some("[mq-deadline] none"));
        assert_eq!(r.status, Status::Change);
        assert_eq!(r.fix.as_ref().map(|f| f.value.as_str()), Some("none"));
        assert_eq!(
            scheduler_row(Some("nvme0n1"), p.clone(), Some("[none] mq-deadline")).status,
            Status::Ok
        );
        assert_eq!(
            scheduler_row(Some("sda"), p, Some("[mq-deadline] none")).status,
            Status::Ok
        );
        assert_eq!(scheduler_row(None, None, None).status, Status::Unknown);
        let cpus = vec![
            (PathBuf::from("/a"), Some("powersave\n".to_string())),
            (PathBuf::from("/b"), Some("performance\n".to_string())),
        ];
        let g = governor_row(&cpus);
        assert_eq!(
            (g.status, g.current.as_str()),
            (Status::Change, "performance,powersave")
        );
        assert_eq!(governor_row(&[]).status, Status::Unknown);
    }

    #[test]
    fn virtual_machines_are_told_about_pacing() {
        let stat = "cpu  100 0 50 800 40 0 0 10 0 0\ncpu0 1 2 3\n";
        let vm = pacing_row(Some("flags\t: fpu sse2 hypervisor avx\n"), Some(stat));
        assert_eq!(vm.status, Status::Advice);
        assert!(
            vm.current.contains("virtual machine, steal 1.00%"),
            "{vm:?}"
        );
        assert!(vm
            .recommended
            .contains("group_commit_min_interval_us = 500"));
        let metal = pacing_row(Some("flags\t: fpu sse2 avx\n"), None);
        assert_eq!(metal.status, Status::Ok);
        assert!(
            metal.current.contains("bare metal, steal unknown"),
            "{metal:?}"
        );
        assert_eq!(pacing_row(None, Some(stat)).status, Status::Unknown);
    }

    #[test]
    fn a_running_memory_monitor_is_named() {
        let kdamond = PathBuf::from("/sys/kernel/mm/damon/admin/kdamonds/0/state");
        let module = PathBuf::from("/sys/module/damon_reclaim/parameters/enabled");
        let r = damon_row(&[
            (kdamond.clone(), "on\n".into()),
            (module.clone(), "N\n".into()),
        ]);
        assert_eq!(r.status, Status::Advice);
        assert!(r.current.contains("kdamonds/0/state"), "{r:?}");
        assert!(!r.current.contains("damon_reclaim"), "{r:?}");
        let off = damon_row(&[(kdamond, "off\n".into()), (module, "N\n".into())]);
        assert_eq!(off.status, Status::Ok);
        assert_eq!(damon_row(&[]).status, Status::Ok);
    }

    #[test]
    fn small_machines_are_told_to_leave_a_cpu() {
        assert_eq!(shards_row(2).status, Status::Advice);
        assert_eq!(shards_row(2).recommended, "taskset -c 1 strand --smp 1");
        assert_eq!(shards_row(4).recommended, "taskset -c 1-3 strand --smp 3");
        assert_eq!(shards_row(1).status, Status::Ok);
        assert_eq!(shards_row(16).status, Status::Ok);
    }

    #[test]
    fn root_and_devices() {
        assert!(is_root(Some("Name:\tx\nUid:\t0\t0\t0\t0\n")));
        assert!(!is_root(Some("Uid:\t1000\t1000\t1000\t1000\n")));
        assert!(!is_root(None));
        assert_eq!(dev_major_minor(0x10302), (259, 2));
        assert_eq!(
            isolation_row(Some("ro isolcpus=2-3 quiet"), true).current,
            "isolcpus=2-3, irqbalance present"
        );
    }
}
