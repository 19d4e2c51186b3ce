//! `strand-bench physics`: the machine's limits that every broker figure is divided by —
//! O_DIRECT sequential write/read bandwidth, write+fdatasync latency of small (4 KiB) and
//! large (1 MiB) appends, and the TCP round trip to a target (a loopback echo server this
//! process starts, by default).
//!
//! Invariant: a data directory without O_DIRECT is refused unless `--allow-buffered`, and
//! a report made that way says `direct_io: false`. Disk I/O goes through strand-storage's
//! O_DIRECT files (its glommio runtime); the network side uses blocking std sockets on
//! their own threads, so neither depends on the load client.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use kafka_protocol::messages::ApiVersionsRequest;
use serde::{Deserialize, Serialize};

use crate::disk::{check_direct_io, measure_in, RawParams};
use crate::stats::{Latency, Percentiles};

/// Append sizes whose write+fdatasync latency is measured.
pub const SYNC_SIZES_BYTES: [usize; 2] = [4096, 1 << 20];
/// Bytes of the echo request and reply.
const ECHO_BYTES: usize = 8;
/// Round trips not measured before the measured ones (connection warm-up).
const RTT_WARMUP_SAMPLES: usize = 50;
/// How long one round trip may take before the target counts as not answering.
const RTT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the target at `--target` speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum TargetKind {
    /// Echoes the bytes it reads (the built-in loopback server does).
    Echo,
    /// A Kafka broker: ApiVersions v0 round trips.
    Kafka,
}

/// Options of `strand-bench physics`.
#[derive(clap::Args, Debug, Clone)]
pub struct PhysicsArgs {
    /// Directory on the data disk; a temporary subdirectory is used and removed.
    #[arg(long, default_value = "data/bench-physics")]
    pub dir: PathBuf,
    /// Measure even if the directory cannot do O_DIRECT (the figures then mean little).
    #[arg(long)]
    pub allow_buffered: bool,
    /// Block size of the sequential write and read.
    #[arg(long, default_value_t = 1 << 20)]
    pub block_bytes: usize,
    /// Writes/reads in flight at once.
    #[arg(long, default_value_t = 4)]
    pub queue_depth: usize,
    /// Bytes written (then read) by the bandwidth test.
    #[arg(long, default_value_t = 256 << 20)]
    pub total_bytes: u64,
    /// Samples per size of the write+fdatasync test (1 MiB: at most 100).
    #[arg(long, default_value_t = 300)]
    pub sync_samples: usize,
    /// HOST:PORT to measure the round trip to (default: a loopback echo server).
    #[arg(long)]
    pub target: Option<String>,
    /// What the target speaks.
    #[arg(long, value_enum, default_value = "echo")]
    pub target_kind: TargetKind,
    /// Round trips measured.
    #[arg(long, default_value_t = 2000)]
    pub rtt_samples: usize,
    /// Write the report here as JSON.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl PhysicsArgs {
    /// A quick measurement (seconds, not minutes) for runs given no `--physics`.
    pub fn quick(dir: PathBuf) -> PhysicsArgs {
        PhysicsArgs {
            dir,
            allow_buffered: false,
            block_bytes: 1 << 20,
            queue_depth: 4,
            total_bytes: 64 << 20,
            sync_samples: 50,
            target: None,
            target_kind: TargetKind::Echo,
            rtt_samples: 500,
            out: None,
        }
    }
}

/// write+fdatasync latency at one append size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SyncLatency {
    pub size_bytes: usize,
    pub latency: Percentiles,
}

/// The machine's physics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhysicsReport {
    pub dir: String,
    pub direct_io: bool,
    pub block_bytes: usize,
    pub queue_depth: usize,
    pub write_mib_s: f64,
    pub read_mib_s: f64,
    pub sync: Vec<SyncLatency>,
    /// The smallest size again, into blocks written with zeros first (how the broker
    /// writes its active segments); absent in reports of older versions.
    #[serde(default)]
    pub sync_zeroed: Option<SyncLatency>,
    /// `disk::SYNC_FILES` files, a 4 KiB write to each at once into zeroed blocks, until
    /// all are durable; absent in reports of older versions.
    #[serde(default)]
    pub sync_files: Option<FilesSync>,
    pub rtt_target: String,
    pub rtt_kind: TargetKind,
    /// Request/response round trips (echo or ApiVersions).
    pub rtt: Percentiles,
    /// TCP connect time (SYN .. SYN-ACK: about one round trip).
    pub connect: Percentiles,
}

/// Many files made durable at once (issue 25's flush of a shard's partitions).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FilesSync {
    pub files: usize,
    /// Each write `O_DSYNC`: the broker's partitions' flushes today.
    pub each_dsync: Percentiles,
    /// Plain writes, then one `fdatasync` of one file (the device flush covers them all).
    pub one_fdatasync: Percentiles,
}

impl PhysicsReport {
    /// write+fdatasync p99 of the smallest measured append, in µs: the lower of the
    /// fallocated-space and zeroed-block measurements (the bound is the best the machine
    /// does).
    pub fn small_sync_p99_us(&self) -> u64 {
        let fallocated = self.sync.first().map(|s| s.latency.p99_us);
        let zeroed = self.sync_zeroed.as_ref().map(|s| s.latency.p99_us);
        match (fallocated, zeroed) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(0),
        }
    }

    /// Reads a report written with `--out`.
    pub fn load(path: &Path) -> anyhow::Result<PhysicsReport> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

/// Measures the physics.
pub fn measure(args: &PhysicsArgs) -> anyhow::Result<PhysicsReport> {
    let direct_io = check_direct_io(&args.dir, args.allow_buffered, "--allow-buffered")?;
    let params = RawParams {
        block_bytes: args.block_bytes,
        queue_depth: args.queue_depth,
        total_bytes: args.total_bytes,
        sync_samples: args.sync_samples,
    };
    let disk = measure_in(&args.dir, &params, &SYNC_SIZES_BYTES)?;
    let (rtt_target, rtt, connect) = match &args.target {
        Some(t) => {
            let (rtt, connect) = rtt_to(t, args.target_kind, args.rtt_samples)?;
            (t.clone(), rtt, connect)
        }
        None => {
            let server = EchoServer::start()?;
            let (rtt, connect) = rtt_to(&server.addr, TargetKind::Echo, args.rtt_samples)?;
            (format!("loopback echo {}", server.addr), rtt, connect)
        }
    };
    Ok(PhysicsReport {
        dir: args.dir.display().to_string(),
        direct_io,
        block_bytes: args.block_bytes,
        queue_depth: args.queue_depth,
        write_mib_s: disk.write_mib_s,
        read_mib_s: disk.read_mib_s,
        sync: disk
            .sync
            .iter()
            .map(|(size, l)| SyncLatency {
                size_bytes: *size,
                latency: l.percentiles(),
            })
            .collect(),
        sync_zeroed: disk.sync_zeroed.as_ref().map(|(size, l)| SyncLatency {
            size_bytes: *size,
            latency: l.percentiles(),
        }),
        sync_files: disk.sync_files.as_ref().map(|(each, shared)| FilesSync {
            files: crate::disk::SYNC_FILES,
            each_dsync: each.percentiles(),
            one_fdatasync: shared.percentiles(),
        }),
        rtt_target,
        rtt_kind: args.target_kind,
        rtt: rtt.percentiles(),
        connect: connect.percentiles(),
    })
}

/// Runs `strand-bench physics`.
pub fn run(args: PhysicsArgs) -> anyhow::Result<()> {
    let report = measure(&args)?;
    print!("{}", table(&report));
    if let Some(out) = &args.out {
        write_json(out, &report, "physics")?;
    }
    Ok(())
}

/// The header of a latency table whose names take `name_width` columns.
pub(crate) fn latency_header(name_width: usize) -> String {
    format!(
        "{:<name_width$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
        "latency (ms)", "p50", "p90", "p99", "p99.9", "max", "n"
    )
}

/// One row of a latency table: p50, p90, p99, p99.9 and max in ms, and the count.
pub(crate) fn latency_row(name: &str, p: &Percentiles, name_width: usize) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "{:<name_width$} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7}\n",
        name,
        ms(p.p50_us),
        ms(p.p90_us),
        ms(p.p99_us),
        ms(p.p999_us),
        ms(p.max_us),
        p.count
    )
}

/// Writes `value` as pretty JSON to `path` and says so on stderr.
pub(crate) fn write_json(path: &Path, value: &impl Serialize, what: &str) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("{what} written to {}", path.display());
    Ok(())
}

/// The report as a readable table.
pub fn table(r: &PhysicsReport) -> String {
    let mut s = format!(
        "# physics of {} ({})\n",
        r.dir,
        if r.direct_io {
            "O_DIRECT"
        } else {
            "BUFFERED: not the disk"
        }
    );
    s += &format!(
        "sequential write {:>9.1} MiB/s   read {:>9.1} MiB/s   (block {} KiB, queue depth {})\n",
        r.write_mib_s,
        r.read_mib_s,
        r.block_bytes / 1024,
        r.queue_depth
    );
    s += &latency_header(28);
    let row = |name: &str, p: &Percentiles| latency_row(name, p, 28);
    for sync in &r.sync {
        s += &row(
            &format!("write+fdatasync {} KiB", sync.size_bytes / 1024),
            &sync.latency,
        );
    }
    if let Some(sync) = &r.sync_zeroed {
        s += &row(
            &format!("  ... {} KiB, zeroed", sync.size_bytes / 1024),
            &sync.latency,
        );
    }
    if let Some(f) = &r.sync_files {
        s += &row(&format!("{} files 4 KiB, O_DSYNC", f.files), &f.each_dsync);
        s += &row(
            &format!("{} files, one fdatasync", f.files),
            &f.one_fdatasync,
        );
    }
    s += &row(
        &format!("tcp rtt ({:?})", r.rtt_kind).to_lowercase(),
        &r.rtt,
    );
    s += &row("tcp connect", &r.connect);
    s += &format!("rtt target: {}\n", r.rtt_target);
    s
}

/// A loopback TCP echo server on its own threads, for the default round-trip figure.
pub struct EchoServer {
    pub addr: String,
}

impl EchoServer {
    /// Binds an ephemeral loopback port and serves each connection on a thread; the
    /// threads end with their connections (and the listener with the process).
    pub fn start() -> anyhow::Result<EchoServer> {
        let l = TcpListener::bind("127.0.0.1:0").context("binding the echo server")?;
        let addr = l.local_addr()?.to_string();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                std::thread::spawn(move || {
                    let _ = c.set_nodelay(true);
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Ok(EchoServer { addr })
    }
}

/// Round trips to `target`: (request/response latency, connect latency).
pub fn rtt_to(
    target: &str,
    kind: TargetKind,
    samples: usize,
) -> anyhow::Result<(Latency, Latency)> {
    let mut connect = Latency::new();
    for _ in 0..samples.clamp(1, 50) {
        let t = Instant::now();
        let c = TcpStream::connect(target).with_context(|| format!("connecting to {target}"))?;
        connect.record(t.elapsed());
        drop(c);
    }
    let mut c = TcpStream::connect(target).with_context(|| format!("connecting to {target}"))?;
    c.set_nodelay(true)?;
    c.set_read_timeout(Some(RTT_TIMEOUT))?;
    let mut rtt = Latency::new();
    let request = match kind {
        TargetKind::Echo => vec![0x42u8; ECHO_BYTES],
        TargetKind::Kafka => {
            crate::kafka_conn::encode_request(&ApiVersionsRequest::default(), 0, 1)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .to_vec()
        }
    };
    for i in 0..samples.max(1) + RTT_WARMUP_SAMPLES {
        let t = Instant::now();
        c.write_all(&request)?;
        match kind {
            TargetKind::Echo => {
                let mut back = [0u8; ECHO_BYTES];
                c.read_exact(&mut back).with_context(|| {
                    format!("{target} did not echo (use --target-kind kafka for a broker)")
                })?;
            }
            TargetKind::Kafka => read_kafka_frame(&mut c)
                .with_context(|| format!("{target} did not answer ApiVersions"))?,
        }
        if i >= RTT_WARMUP_SAMPLES {
            rtt.record(t.elapsed());
        }
    }
    Ok((rtt, connect))
}

/// Reads (and discards) one length-prefixed frame.
fn read_kafka_frame(c: &mut TcpStream) -> anyhow::Result<()> {
    let mut len = [0u8; 4];
    c.read_exact(&mut len)?;
    let n = usize::try_from(i32::from_be_bytes(len))
        .ok()
        .filter(|&n| n <= crate::kafka_conn::RESPONSE_BYTES_MAX)
        .ok_or_else(|| anyhow::anyhow!("bad frame length"))?;
    let mut buf = vec![0u8; n];
    c.read_exact(&mut buf)?;
    Ok(())
}
