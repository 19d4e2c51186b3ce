//! `strandctl self-test`: the physics Strand runs on, measured with plain std I/O (no
//! glommio) — O_DIRECT sequential write and read bandwidth, `fdatasync` latency of small
//! appends — and the network path to the broker: ApiVersions round trips and produce
//! throughput to a temporary topic (deleted afterwards). Each figure is PASS or WARN
//! against a named threshold, with the reason.
//!
//! Invariant: the test touches only files it creates (removed at the end, also on error)
//! and a topic it creates (deleted at the end); O_DIRECT buffers are 4096-byte aligned
//! by slicing an over-allocated `Vec` at `align_offset` (no raw allocation needed), and
//! every O_DIRECT length and file offset is a multiple of [`DIRECT_ALIGN_BYTES`].

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::ApiVersionsRequest;

use crate::cli::{Acks, SelfTestArgs};
use crate::kafka::KafkaClient;
use crate::output::Table;
use crate::Outcome;

/// O_DIRECT alignment of buffers, lengths and offsets (covers 512 B and 4 KiB sectors).
pub const DIRECT_ALIGN_BYTES: usize = 4096;
/// Below this O_DIRECT write bandwidth, WARN: a SATA SSD does ~500 MB/s, NVMe > 1 GB/s.
pub const DISK_WRITE_MB_PER_S_MIN: f64 = 200.0;
/// Below this O_DIRECT read bandwidth, WARN.
pub const DISK_READ_MB_PER_S_MIN: f64 = 200.0;
/// Above this fdatasync p99, WARN: each produce with acks=all waits for one.
pub const FDATASYNC_P99_MS_MAX: f64 = 10.0;
/// Above this ApiVersions round-trip p99, WARN: loopback or a LAN answers in well under 1 ms.
pub const RTT_P99_MS_MAX: f64 = 2.0;
/// Below this produce throughput, WARN.
pub const PRODUCE_MB_PER_S_MIN: f64 = 50.0;
/// Bytes per fdatasync sample append.
const SYNC_APPEND_BYTES: usize = 4096;
/// Records per produce batch and their size: ~1 MiB batches, under `message.max.bytes`.
const PRODUCE_BATCH_RECORDS: u32 = 1000;
const PRODUCE_RECORD_BYTES: usize = 1000;

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Name.
    pub name: String,
    /// Value in `unit`.
    pub value: f64,
    /// Unit.
    pub unit: &'static str,
    /// Threshold and its direction.
    pub limit: Limit,
    /// Why it matters (printed on WARN).
    pub why: &'static str,
}

/// A threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// PASS when value >= this.
    AtLeast(f64),
    /// PASS when value <= this.
    AtMost(f64),
}

impl Figure {
    /// Whether the figure is within its limit.
    pub fn pass(&self) -> bool {
        match self.limit {
            Limit::AtLeast(l) => self.value >= l,
            Limit::AtMost(l) => self.value <= l,
        }
    }
}

/// Figures as a table (pure).
pub fn render(figures: &[Figure]) -> String {
    let mut t = Table::new(&["CHECK", "VALUE", "THRESHOLD", "STATUS", "REASON"]);
    for f in figures {
        let (op, l) = match f.limit {
            Limit::AtLeast(l) => (">=", l),
            Limit::AtMost(l) => ("<=", l),
        };
        t.row(vec![
            f.name.clone(),
            format!("{:.2} {}", f.value, f.unit),
            format!("{op} {l} {}", f.unit),
            if f.pass() { "PASS" } else { "WARN" }.into(),
            if f.pass() {
                String::new()
            } else {
                f.why.into()
            },
        ]);
    }
    t.render()
}

/// The `q` quantile (0..=1) of samples, nearest rank; `None` when empty.
pub fn quantile(samples: &mut [Duration], q: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let n = samples.len();
    let rank = (q * n as f64).ceil() as usize;
    samples.get(rank.clamp(1, n) - 1).copied()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

/// A zero-filled buffer of `len` bytes starting at a [`DIRECT_ALIGN_BYTES`] boundary.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let storage = vec![0xa5u8; len + DIRECT_ALIGN_BYTES];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN_BYTES);
        assert!(
            start < DIRECT_ALIGN_BYTES,
            "align_offset on u8 is always possible"
        );
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Removes a file when dropped (also on error paths).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn open_direct(path: &Path, create: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(create)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Disk figures in `dir`.
pub fn disk(args: &SelfTestArgs) -> anyhow::Result<Vec<Figure>> {
    let block = usize::try_from(args.block_bytes)?;
    if block == 0 || block % DIRECT_ALIGN_BYTES != 0 {
        anyhow::bail!(
            "--block-bytes must be a positive multiple of {DIRECT_ALIGN_BYTES}, got {block}"
        );
    }
    let blocks = args.disk_bytes.div_ceil(args.block_bytes).max(1);
    let total = blocks * args.block_bytes;
    let path = args
        .dir
        .join(format!(".strandctl-self-test-{}.dat", std::process::id()));
    let tmp = TempFile(path.clone());
    let mut f = open_direct(&tmp.0, true).map_err(|e| {
        anyhow::anyhow!(
            "cannot open {} with O_DIRECT: {e} — the file system of {} does not support \
             direct I/O (tmpfs?); strand needs it for its data directory",
            path.display(),
            args.dir.display()
        )
    })?;
    let mut buf = AlignedBuf::new(block);
    let t = Instant::now();
    for _ in 0..blocks {
        f.write_all(buf.as_slice())?;
    }
    f.sync_data()?;
    let write = t.elapsed();
    drop(f);
    let mut f = open_direct(&tmp.0, false)?;
    let t = Instant::now();
    for _ in 0..blocks {
        f.read_exact(buf.as_mut_slice())?;
    }
    let read = t.elapsed();
    drop(f);
    let mut syncs = fdatasync_samples(&args.dir, args.sync_samples)?;
    let mut figures = vec![
        Figure {
            name: "disk O_DIRECT write".into(),
            value: mb_per_s(total, write),
            unit: "MB/s",
            limit: Limit::AtLeast(DISK_WRITE_MB_PER_S_MIN),
            why: "slow sequential writes cap produce throughput",
        },
        Figure {
            name: "disk O_DIRECT read".into(),
            value: mb_per_s(total, read),
            unit: "MB/s",
            limit: Limit::AtLeast(DISK_READ_MB_PER_S_MIN),
            why: "slow reads make catch-up consumers and recovery slow",
        },
    ];
    for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
        if let Some(d) = quantile(&mut syncs, q) {
            figures.push(Figure {
                name: format!("disk fdatasync {label}"),
                value: ms(d),
                unit: "ms",
                limit: Limit::AtMost(FDATASYNC_P99_MS_MAX),
                why: "every acks=all produce waits for an fdatasync; use a disk with power-loss protection",
            });
        }
    }
    Ok(figures)
}

/// `n` appends of [`SYNC_APPEND_BYTES`] each followed by fdatasync; their latencies.
fn fdatasync_samples(dir: &Path, n: u32) -> anyhow::Result<Vec<Duration>> {
    let tmp = TempFile(dir.join(format!(".strandctl-self-test-{}.sync", std::process::id())));
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&tmp.0)?;
    let data = vec![0x5au8; SYNC_APPEND_BYTES];
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&data)?;
        f.sync_data()?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Network figures against the broker `client` talks to.
pub fn network(client: &mut KafkaClient, args: &SelfTestArgs) -> anyhow::Result<Vec<Figure>> {
    let mut rtts = Vec::with_capacity(usize::try_from(args.rtt_samples).unwrap_or(0));
    for _ in 0..args.rtt_samples {
        let t = Instant::now();
        client.send_at(&ApiVersionsRequest::default(), 0)?;
        rtts.push(t.elapsed());
    }
    let mut figures = Vec::new();
    for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
        if let Some(d) = quantile(&mut rtts, q) {
            figures.push(Figure {
                name: format!("broker round trip {label}"),
                value: ms(d),
                unit: "ms",
                limit: Limit::AtMost(RTT_P99_MS_MAX),
                why: "every request pays it: check the network path, CPU load and power saving",
            });
        }
    }
    if args.produce_bytes > 0 {
        figures.push(produce_throughput(client, args.produce_bytes)?);
    }
    Ok(figures)
}

fn produce_throughput(client: &mut KafkaClient, bytes: u64) -> anyhow::Result<Figure> {
    let topic = format!("strandctl-self-test-{}", std::process::id());
    crate::topic::create(client, &topic, 1, 1, &[])?;
    let batch_bytes = u64::from(PRODUCE_BATCH_RECORDS) * PRODUCE_RECORD_BYTES as u64;
    let batches = bytes.div_ceil(batch_bytes).max(1);
    let batch = crate::produce::filler_batch(PRODUCE_BATCH_RECORDS, PRODUCE_RECORD_BYTES);
    let t = Instant::now();
    let mut result = Ok(());
    for _ in 0..batches {
        let data = vec![PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(batch.clone()))];
        if let Err(e) = crate::produce::produce_batches(client, &topic, Acks::All, data) {
            result = Err(e);
            break;
        }
    }
    let elapsed = t.elapsed();
    let deleted = crate::topic::delete(client, std::slice::from_ref(&topic));
    result?;
    deleted?;
    Ok(Figure {
        name: "produce acks=all (1 partition)".into(),
        value: mb_per_s(batches * batch_bytes, elapsed),
        unit: "MB/s",
        limit: Limit::AtLeast(PRODUCE_MB_PER_S_MIN),
        why: "compare with the disk write figure: the gap is the broker's or the network's",
    })
}

/// Below this node-to-node transfer rate, WARN: 10 GbE moves ~1 GB/s; 1 GbE ~110 MB/s.
pub const PEER_MB_PER_S_MIN: f64 = 100.0;
/// How long the node may take for the whole peer test (round trips + transfer).
const PEER_TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Node-to-node figures: the node at `admin` measures each peer through its admin API
/// (`/v1/self-test/network`).
pub fn peers(admin: &str, args: &SelfTestArgs) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for peer in &args.peer_admin {
        let path = format!(
            "/v1/self-test/network?peer={peer}&rounds={}&bytes={}",
            args.peer_rounds, args.peer_bytes
        );
        let resp = crate::admin_http::get(admin, &path, PEER_TEST_TIMEOUT)?;
        let v: serde_json::Value = serde_json::from_str(&resp.body)
            .map_err(|e| anyhow::anyhow!("{admin}{path}: not JSON ({e}): {}", resp.body.trim()))?;
        if resp.status != 200 {
            anyhow::bail!(
                "{admin} could not measure {peer}: {} (is {peer} the admin address of a \
                 running strand node, reachable from {admin}?)",
                v["error"].as_str().unwrap_or(resp.body.trim())
            );
        }
        let num = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        figures.push(Figure {
            name: format!("{admin} -> {peer} round trip p99"),
            value: num("rtt_p99_ms"),
            unit: "ms",
            limit: Limit::AtMost(RTT_P99_MS_MAX),
            why: "replication and acks=all pay it on every batch: check NICs, switches, MTU",
        });
        figures.push(Figure {
            name: format!("{admin} -> {peer} transfer"),
            value: num("throughput_mb_per_s"),
            unit: "MB/s",
            limit: Limit::AtLeast(PEER_MB_PER_S_MIN),
            why: "followers catch up and replicate at most this fast",
        });
    }
    Ok(figures)
}

/// Runs the selected tests; returns the report and the outcome. `admin` is given when
/// peers are to be measured from that node.
pub fn run(
    client: Option<&mut KafkaClient>,
    admin: Option<&str>,
    args: &SelfTestArgs,
) -> anyhow::Result<(String, Outcome)> {
    let mut figures = Vec::new();
    if !args.skip_disk {
        figures.extend(disk(args)?);
    }
    if let Some(c) = client {
        figures.extend(network(c, args)?);
    }
    if let Some(a) = admin {
        figures.extend(peers(a, args)?);
    }
    let warns = figures.iter().filter(|f| !f.pass()).count();
    let mut out = render(&figures);
    out.push_str(&format!("\n{} checks, {warns} WARN\n", figures.len()));
    let outcome = if warns > 0 && args.strict {
        Outcome::Problems
    } else {
        Outcome::Ok
    };
    Ok((out, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(quantile(&mut v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&mut v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&mut v, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(quantile(&mut [], 0.5), None);
        assert_eq!(
            quantile(&mut [Duration::from_millis(3)], 0.99),
            Some(Duration::from_millis(3))
        );
    }

    #[test]
    fn figures_pass_or_warn_with_reason() {
        let f = Figure {
            name: "disk fdatasync p99".into(),
            value: 12.5,
            unit: "ms",
            limit: Limit::AtMost(FDATASYNC_P99_MS_MAX),
            why: "slow",
        };
        assert!(!f.pass());
        let text = render(&[f]);
        assert!(
            text.contains("12.50 ms")
                && text.contains("<= 10 ms")
                && text.contains("WARN")
                && text.contains("slow"),
            "{text}"
        );
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for len in [4096, 8192, 1 << 20] {
            let b = AlignedBuf::new(len);
            assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_ALIGN_BYTES, 0);
            assert_eq!(b.as_slice().len(), len);
        }
    }
}
