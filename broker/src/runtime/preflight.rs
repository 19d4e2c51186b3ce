//! Start-up checks that fail loudly with the fix in the message (ARCHITECTURE.md, The
//! shard runtime): data directory usable with O_DIRECT, Kafka and admin ports free.
//! io_uring and locked memory are checked when the executors start (`shard::run`);
//! `strand --check` ([`findings`]) runs every check, those two included, and reports each.

use anyhow::{bail, Context};

use crate::common::config::Config;

/// Runs the checks `shard::run` needs before starting executors.
pub fn check(config: &Config) -> anyhow::Result<()> {
    data_dir(config)?;
    if let Some(warning) = direct_io(config)? {
        tracing::warn!(warning = %warning, "data directory without O_DIRECT: using buffered i/o as configured");
    }
    ports(config)
}

/// How one check came out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed; what was found.
    Ok(String),
    /// Runs, degraded; what and why.
    Warn(String),
    /// Start-up would fail; the message says what to do.
    Fail(String),
}

/// One check's result.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What was checked.
    pub check: &'static str,
    /// The outcome.
    pub outcome: Outcome,
    /// What to do when it is not `Ok`.
    pub fix: &'static str,
}

impl Finding {
    fn of(check: &'static str, fix: &'static str, r: anyhow::Result<Outcome>) -> Finding {
        let outcome = r.unwrap_or_else(|e| Outcome::Fail(format!("{e:#}")));
        Finding {
            check,
            outcome,
            fix,
        }
    }
}

/// Every start-up check, each reported (a failure does not stop the later ones, except
/// that O_DIRECT is not probed in a data directory that cannot be created).
pub fn findings(config: &Config) -> Vec<Finding> {
    let mut out = Vec::new();
    let dir = data_dir(config);
    let dir_ok = dir.is_ok();
    out.push(Finding::of(
        "data directory",
        "point --data-dir (data_dir) at a directory on a local disk that the strand user \
         can create and write",
        dir.map(|()| Outcome::Ok(format!("{} is writable", config.data_dir.display()))),
    ));
    if dir_ok {
        let dio = direct_io(config).map(|w| match w {
            None => Outcome::Ok("O_DIRECT works".into()),
            Some(w) => Outcome::Warn(format!("{w}; buffered I/O allowed by allow_buffered_io")),
        });
        out.push(Finding::of(
            "O_DIRECT",
            "put the data directory on ext4/xfs on a local disk (not tmpfs or overlayfs), or \
             accept unpredictable latency with --allow-buffered-io true",
            dio,
        ));
    }
    let shards = shard_count(config);
    let plan = shards.and_then(|n| {
        strand_storage::io_runtime::plan_io_memory(n)
            .map(|p| (n, p))
            .map_err(anyhow::Error::from)
    });
    let io_memory = plan.as_ref().ok().map(|(_, p)| p.io_memory_bytes);
    out.push(Finding::of(
        "locked memory",
        "LimitMEMLOCK=infinity in the systemd unit, or `ulimit -l unlimited`",
        plan.map(|(n, p)| {
            Outcome::Ok(format!(
                "RLIMIT_MEMLOCK {} bytes: {} bytes of io_uring buffers for each of {n} shards",
                p.memlock_bytes, p.io_memory_bytes
            ))
        }),
    ));
    if let Some(io_memory) = io_memory {
        let r = crate::runtime::probe::probe_io_uring(io_memory)
            .map(|()| Outcome::Ok("an io_uring executor starts".into()))
            .map_err(anyhow::Error::msg);
        out.push(Finding::of(
            "io_uring",
            "kernel 5.8 or newer, sysctl kernel.io_uring_disabled=0, and no seccomp profile \
             that blocks io_uring_setup (containers: allow it)",
            r,
        ));
    }
    out.push(Finding::of(
        "listen addresses",
        "stop the other process, or choose other addresses with --kafka-addr/--listeners/--admin-addr",
        ports(config).map(|()| {
            let kafka: Vec<String> = config.listeners.iter().map(|l| l.addr.to_string()).collect();
            Outcome::Ok(format!(
                "{} (Kafka) and {} (admin) are free",
                kafka.join(", "),
                config.admin_addr
            ))
        }),
    ));
    out
}

/// Shards `shard::run` would start.
fn shard_count(config: &Config) -> anyhow::Result<usize> {
    let cpus = crate::runtime::cpus::affinity_cpus()?.len();
    match config.smp {
        Some(n) if n > cpus => {
            bail!("--smp {n} but only {cpus} CPUs are in this process's affinity mask")
        }
        Some(n) => Ok(n),
        None => Ok(cpus),
    }
}

fn data_dir(config: &Config) -> anyhow::Result<()> {
    strand_storage::io::create_dir_all_blocking(&config.data_dir)
        .with_context(|| format!("cannot create data directory {}", config.data_dir.display()))
}

/// `Ok(Some(warning))`: no O_DIRECT, but buffered I/O is allowed.
fn direct_io(config: &Config) -> anyhow::Result<Option<String>> {
    match strand_storage::io::probe_direct_io_blocking(&config.data_dir) {
        Ok(()) => Ok(None),
        Err(e) if config.allow_buffered_io => Ok(Some(e.to_string())),
        Err(e) => bail!("{e}"),
    }
}

fn ports(config: &Config) -> anyhow::Result<()> {
    for l in &config.listeners {
        port_free("Kafka", l.addr, "--listeners (or --kafka-addr)")?;
    }
    for (what, addr, flag) in [
        ("admin HTTP", config.admin_addr, "--admin-addr"),
        ("native protocol", config.native_addr, "--native-addr"),
    ] {
        port_free(what, addr, flag)?;
    }
    Ok(())
}

/// Fails when a per-shard native port of one of `shards` shards is taken.
pub fn native_shard_ports_free(config: &Config, shards: usize) -> anyhow::Result<()> {
    if config.native_shard_base_port == 0 {
        return Ok(());
    }
    for s in 0..shards {
        let port = usize::from(config.native_shard_base_port) + s;
        let port = u16::try_from(port).map_err(|_| {
            anyhow::anyhow!(
                "native port of shard {s} would be {port}, past 65535: lower \
                 --native-shard-base-port"
            )
        })?;
        let addr = std::net::SocketAddr::new(config.native_addr.ip(), port);
        port_free(
            "a shard's native protocol",
            addr,
            "--native-shard-base-port",
        )?;
    }
    Ok(())
}

/// Fails when something already listens on `addr`. The listeners bind with SO_REUSEPORT
/// (as glommio does), so connections left in TIME_WAIT by a previous run do not block a
/// restart; a live listener is detected by connecting to it.
fn port_free(what: &str, addr: std::net::SocketAddr, flag: &str) -> anyhow::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = if addr.ip().is_unspecified() {
        std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
    } else {
        addr
    };
    // A process killed with SIGKILL keeps its listening socket for a moment while the
    // kernel tears down its io_uring rings; only a listener that stays is "in use".
    let deadline = crate::common::clock::now() + std::time::Duration::from_secs(3);
    let mut listening = true;
    while listening && crate::common::clock::now() < deadline {
        listening =
            std::net::TcpStream::connect_timeout(&probe, std::time::Duration::from_millis(300))
                .is_ok();
        if listening {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    if listening {
        bail!(
            "cannot listen on {addr} for {what}: another process is listening there; stop it \
             or pick another address with {flag}"
        );
    }
    Ok(())
}

/// Prints every finding with its fix (stdout: this is `--check`'s report); returns the
/// process exit code: 0 when nothing failed, 1 otherwise. Warnings do not fail.
pub fn report(findings: &[Finding]) -> i32 {
    let mut failed = 0;
    for f in findings {
        match &f.outcome {
            Outcome::Ok(what) => println!("ok    {}: {what}", f.check),
            Outcome::Warn(what) => {
                println!("warn  {}: {what}\n      fix: {}", f.check, f.fix);
            }
            Outcome::Fail(what) => {
                failed += 1;
                println!("FAIL  {}: {what}\n      fix: {}", f.check, f.fix);
            }
        }
    }
    if failed == 0 {
        println!("strand --check: all checks passed");
        0
    } else {
        println!("strand --check: {failed} check(s) failed");
        1
    }
}
