//! `strand-bench disk`: the data directory's physics and the storage engine against it.
//!
//! Physics: raw O_DIRECT sequential write and read bandwidth (block size and queue depth
//! configurable) and write+fdatasync latency at several sizes. Engine: append+flush
//! throughput and flush latency for each (partitions, batch size), each printed as a
//! ratio to the physics figure that bounds it.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures::future::join_all;
use strand_storage::io::{probe_direct_io_blocking, SegmentFile, WriteSync};
use strand_storage::io_runtime::block_on;
use strand_storage::{AppendEntry, BatchCache, FrameKind, Log, LogConfig, RaftTerm, SystemClock};
use strand_wire::BatchBuilder;

use crate::stats::Latency;

const MIB: f64 = 1024.0 * 1024.0;
/// Sizes at which raw write+fdatasync latency is measured.
const SYNC_SIZES_BYTES: [usize; 3] = [4096, 64 * 1024, 1024 * 1024];
/// Bytes appended per flush in the engine's throughput mode.
const THROUGHPUT_FLUSH_BYTES: usize = 1024 * 1024;
/// Bytes of the raw write measured right before each throughput case.
const ADJACENT_RAW_BYTES: u64 = 256 * 1024 * 1024;

/// Options of `strand-bench disk`.
#[derive(clap::Args, Debug)]
pub struct DiskArgs {
    /// Directory on the disk to measure; a temporary subdirectory is used and removed.
    #[arg(long, default_value = "data")]
    dir: PathBuf,
    /// Measure even if the directory cannot do O_DIRECT (figures then mean little).
    #[arg(long)]
    allow_buffered_io: bool,
    /// Block size of the raw sequential write and read.
    #[arg(long, default_value_t = 1 << 20)]
    block_bytes: usize,
    /// Concurrent raw writes/reads in flight.
    #[arg(long, default_value_t = 4)]
    queue_depth: usize,
    /// Bytes written (then read) by the raw bandwidth test.
    #[arg(long, default_value_t = 512 << 20)]
    total_bytes: u64,
    /// Samples per size for the write+fdatasync latency test.
    #[arg(long, default_value_t = 300)]
    sync_samples: usize,
    /// Seconds per engine case.
    #[arg(long, default_value_t = 2.0)]
    engine_secs: f64,
    /// Partition counts for the engine cases.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    partitions: Vec<usize>,
    /// Batch sizes for the engine cases.
    #[arg(long, value_delimiter = ',', default_value = "1024,65536")]
    batch_bytes: Vec<usize>,
    /// Flush every partition in rounds: each round begins all partitions' flushes in one
    /// turn and waits for all of them before the next (a shard-wide gathered flush),
    /// instead of each partition flushing again as soon as its own flush ends (the
    /// broker's way). Measured slower on a virtio disk (issue 25's note, session 32).
    #[arg(long)]
    flush_rounds: bool,
    /// Measure only the raw O_DIRECT sequential write and read bandwidth (no latencies, no
    /// engine cases): the raw figure beside another measurement (`make bench-goals`).
    #[arg(long)]
    bandwidth_only: bool,
}

/// The physics of the disk.
pub(crate) struct Physics {
    pub(crate) write_mib_s: f64,
    pub(crate) read_mib_s: f64,
    /// (append size in bytes, write+fdatasync latency).
    pub(crate) sync: Vec<(usize, Latency)>,
    /// write+fdatasync latency of the smallest size into blocks written with zeros first
    /// (no extent to convert: what the broker's flushes meet, `ZERO_AHEAD_BYTES`).
    pub(crate) sync_zeroed: Option<(usize, Latency)>,
    /// [`SYNC_FILES`] files, one 4 KiB write to each at once into zeroed blocks, until all
    /// are durable: (each write `O_DSYNC`, as the broker's partitions flush today; plain
    /// writes, then one `fdatasync` of one of the files).
    pub(crate) sync_files: Option<(Latency, Latency)>,
}

/// Files written at once by the many-files durability measurement (issue 25's 16
/// partitions on one shard).
pub(crate) const SYNC_FILES: usize = 16;

/// What the raw measurement does.
#[derive(Clone, Copy)]
pub(crate) struct RawParams {
    pub(crate) block_bytes: usize,
    pub(crate) queue_depth: usize,
    pub(crate) total_bytes: u64,
    pub(crate) sync_samples: usize,
}

/// Refuses a directory without O_DIRECT unless `allow`; `flag` names the override.
pub(crate) fn check_direct_io(dir: &Path, allow: bool, flag: &str) -> anyhow::Result<bool> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    match probe_direct_io_blocking(dir) {
        Ok(()) => Ok(true),
        Err(e) if allow => {
            eprintln!("warning: {e}; measuring buffered i/o as asked");
            Ok(false)
        }
        Err(e) => {
            tracing::debug!(error = %e, "O_DIRECT probe failed");
            anyhow::bail!(
                "refusing {}: it cannot do O_DIRECT (tmpfs cannot), so the figures would \
                 measure the page cache, not the disk; use a directory on the data disk, or \
                 pass {flag} to measure buffered i/o anyway",
                dir.display()
            )
        }
    }
}

/// Measures the raw physics in a fresh work directory under `dir` (removed after).
pub(crate) fn measure_in(
    dir: &Path,
    params: &RawParams,
    sizes: &[usize],
) -> anyhow::Result<Physics> {
    let work = dir.join(format!(".strand-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = block_on("strand-bench", 1, async {
        strand_storage::io::prime_device_probe(&work).await?;
        measure_physics(params, &work, sizes).await
    });
    let _ = std::fs::remove_dir_all(&work);
    result?
}

impl Physics {
    /// Raw write+fdatasync p99 at the measured size closest to (at least) `bytes`.
    fn sync_p99_us(&self, bytes: usize) -> u64 {
        let distance = |size: usize| (size as f64).ln() - (bytes.max(1) as f64).ln();
        let (_, l) = self
            .sync
            .iter()
            .min_by(|a, b| distance(a.0).abs().total_cmp(&distance(b.0).abs()))
            .expect("sync latency measured at least once");
        l.quantile_us(0.99)
    }
}

/// Runs the disk benchmark.
pub fn run(args: DiskArgs) -> anyhow::Result<()> {
    check_direct_io(&args.dir, args.allow_buffered_io, "--allow-buffered-io")?;
    let work = args
        .dir
        .join(format!(".strand-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = block_on("strand-bench", 1, run_all(&args, &work));
    let _ = std::fs::remove_dir_all(&work);
    result?
}

async fn run_all(args: &DiskArgs, work: &Path) -> anyhow::Result<()> {
    strand_storage::io::prime_device_probe(work).await?;
    println!("# disk physics of {}", args.dir.display());
    let params = RawParams {
        block_bytes: args.block_bytes,
        queue_depth: args.queue_depth,
        total_bytes: args.total_bytes,
        sync_samples: args.sync_samples,
    };
    let print_bandwidth = |write_mib_s: f64, read_mib_s: f64| {
        println!(
            "raw O_DIRECT sequential write: {write_mib_s:.1} MiB/s  read: {read_mib_s:.1} MiB/s  \
             (block {} KiB, qd {})",
            args.block_bytes / 1024,
            args.queue_depth
        );
    };
    if args.bandwidth_only {
        let (write_mib_s, read_mib_s) = raw_bandwidth(&params, work, true).await?;
        print_bandwidth(write_mib_s, read_mib_s.unwrap_or_default());
        return Ok(());
    }
    let physics = measure_physics(&params, work, &SYNC_SIZES_BYTES).await?;
    print_bandwidth(physics.write_mib_s, physics.read_mib_s);
    for (size, l) in &physics.sync {
        println!(
            "raw write+fdatasync {:>5} KiB: {}",
            size / 1024,
            l.summary()
        );
    }
    if let Some((each, shared)) = &physics.sync_files {
        println!(
            "raw {SYNC_FILES} files x 4 KiB, O_DSYNC each: {}",
            each.summary()
        );
        println!(
            "raw {SYNC_FILES} files x 4 KiB, one fdatasync: {}",
            shared.summary()
        );
    }
    println!();
    engine_table(args, &params, &physics, work).await
}

/// The storage engine's cases, each throughput case beside a raw write measured right
/// before it: on a shared disk whose raw bandwidth moves by 2× within minutes (issue 25's
/// notes), the adjacent figure is the physics the case ran against.
async fn engine_table(
    args: &DiskArgs,
    params: &RawParams,
    physics: &Physics,
    work: &Path,
) -> anyhow::Result<()> {
    let adjacent = RawParams {
        total_bytes: params.total_bytes.min(ADJACENT_RAW_BYTES),
        ..*params
    };
    println!("# storage engine (append + group-commit flush), ratios to physics");
    println!(
        "{:>5} {:>9} {:>10} | {:>10} {:>6} {:>10} {:>6} | {:>10} {:>10} {:>6}",
        "parts",
        "batch",
        "mode",
        "MiB/s",
        "x raw",
        "raw now",
        "x now",
        "flush p50",
        "flush p99",
        "x raw"
    );
    for &p in &args.partitions {
        for &b in &args.batch_bytes {
            for (mode, per_flush) in [
                ("thruput", (THROUGHPUT_FLUSH_BYTES / b).max(1)),
                ("latency", 1),
            ] {
                let now = if mode == "thruput" {
                    Some(raw_bandwidth(&adjacent, work, false).await?.0)
                } else {
                    None
                };
                let dir = work.join(format!("engine-{p}-{b}-{mode}"));
                let shape = (p, b, per_flush, args.flush_rounds);
                let r = engine_case(&dir, shape, args.engine_secs).await?;
                let write_bytes = per_flush * (b + strand_storage::frame::FRAME_HEADER_BYTES);
                let raw_p99 = physics.sync_p99_us(write_bytes).max(1);
                let (now_text, x_now) = match now {
                    Some(w) => (format!("{w:.1}"), format!("{:.2}", r.mib_s / w)),
                    None => ("-".to_string(), "-".to_string()),
                };
                println!(
                    "{p:>5} {:>7}KiB {mode:>10} | {:>10.1} {:>6.2} {now_text:>10} {x_now:>6} | \
                     {:>8.3}ms {:>8.3}ms {:>6.2}",
                    b / 1024,
                    r.mib_s,
                    r.mib_s / physics.write_mib_s,
                    r.flush.quantile_us(0.5) as f64 / 1000.0,
                    r.flush.quantile_us(0.99) as f64 / 1000.0,
                    r.flush.quantile_us(0.99) as f64 / raw_p99 as f64,
                );
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    println!();
    println!(
        "targets: thruput x raw >= 0.70 with 64 KiB batches; flush p99 x raw <= 1.30 \
         (`raw now`: O_DIRECT write of {} MiB just before the case; `x now` against it)",
        adjacent.total_bytes >> 20
    );
    Ok(())
}

async fn measure_physics(
    args: &RawParams,
    work: &Path,
    sizes: &[usize],
) -> anyhow::Result<Physics> {
    let (write_mib_s, read_mib_s) = raw_bandwidth(args, work, true).await?;
    let read_mib_s = read_mib_s.unwrap_or_default();
    let mut sync = Vec::new();
    for &size in sizes {
        let samples = if size >= 1 << 20 {
            args.sync_samples.min(100)
        } else {
            args.sync_samples
        };
        sync.push((size, sync_latency(work, size, samples.max(1), false).await?));
    }
    let sync_zeroed = match sizes.first() {
        Some(&size) => Some((
            size,
            sync_latency(work, size, args.sync_samples.max(1), true).await?,
        )),
        None => None,
    };
    let samples = args.sync_samples.max(1);
    let sync_files = Some((
        files_sync_latency(work, samples, false).await?,
        files_sync_latency(work, samples, true).await?,
    ));
    Ok(Physics {
        write_mib_s,
        read_mib_s,
        sync,
        sync_zeroed,
        sync_files,
    })
}

/// Raw O_DIRECT sequential write (then fdatasync) bandwidth in MiB/s, and with `read` the
/// read bandwidth of reading it back: `total_bytes` in blocks of `block_bytes`,
/// `queue_depth` in flight, in a file under `work` (removed).
async fn raw_bandwidth(
    args: &RawParams,
    work: &Path,
    read: bool,
) -> anyhow::Result<(f64, Option<f64>)> {
    let block = args.block_bytes.max(4096) & !4095;
    let blocks = (args.total_bytes / block as u64).max(1);
    let path = work.join("raw-bandwidth");
    let file = Rc::new(SegmentFile::create(&path, WriteSync::Fdatasync).await?);
    file.preallocate(blocks * block as u64)
        .await
        .map_err(|e| anyhow::anyhow!("fallocate: {e:?}"))?;
    let data = vec![0xA5u8; block];
    let qd = args.queue_depth.max(1) as u64;
    let start = Instant::now();
    let writers = (0..qd).map(|w| {
        let (file, data) = (file.clone(), &data);
        async move {
            let mut i = w;
            while i < blocks {
                file.write_aligned(i * block as u64, data)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                i += qd;
            }
            anyhow::Ok(())
        }
    });
    join_all(writers)
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    file.fdatasync()
        .await
        .map_err(|e| anyhow::anyhow!("fdatasync: {e:?}"))?;
    let write_mib_s = (blocks * block as u64) as f64 / MIB / start.elapsed().as_secs_f64();
    let read_mib_s = if read {
        let start = Instant::now();
        let readers = (0..qd).map(|w| {
            let file = file.clone();
            async move {
                let mut i = w;
                while i < blocks {
                    file.read(i * block as u64, block).await?;
                    i += qd;
                }
                anyhow::Ok(())
            }
        });
        join_all(readers)
            .await
            .into_iter()
            .collect::<anyhow::Result<Vec<_>>>()?;
        Some((blocks * block as u64) as f64 / MIB / start.elapsed().as_secs_f64())
    } else {
        None
    };
    drop(file);
    std::fs::remove_file(&path)?;
    Ok((write_mib_s, read_mib_s))
}

/// [`SYNC_FILES`] files written with zeros and synced first; then per sample one 4 KiB
/// write to each at once, until all are durable: each write `O_DSYNC` (`shared` false),
/// or plain writes and then one `fdatasync` of the first file (`shared`). The second is
/// durable for all of them only because the writes change no metadata (written blocks,
/// no size change) and a file's fdatasync flushes the device's write cache, which holds
/// every write completed before it: the floor of a shard flushing its partitions with one
/// device flush (issue 25), measured, not promised by POSIX.
async fn files_sync_latency(work: &Path, samples: usize, shared: bool) -> anyhow::Result<Latency> {
    const WRITE_BYTES: usize = 4096;
    let total = (WRITE_BYTES * samples) as u64;
    let sync = if shared {
        WriteSync::Fdatasync
    } else {
        WriteSync::EachWrite
    };
    let zeros = vec![0u8; 1 << 20];
    let mut files = Vec::with_capacity(SYNC_FILES);
    for i in 0..SYNC_FILES {
        let path = work.join(format!("raw-files-{i}"));
        let file = SegmentFile::create(&path, sync).await?;
        write_zeros_synced(&file, total, &zeros).await?;
        files.push((path, file));
    }
    let data = vec![0x5Au8; WRITE_BYTES];
    let mut lat = Latency::new();
    for i in 0..samples {
        let pos = (i * WRITE_BYTES) as u64;
        let t = Instant::now();
        let writes = files.iter().map(|(_, f)| f.write_aligned(pos, &data));
        for r in join_all(writes).await {
            r.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        if shared {
            files[0]
                .1
                .fdatasync()
                .await
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        lat.record(t.elapsed());
    }
    for (path, file) in files {
        file.close().await?;
        std::fs::remove_file(&path)?;
    }
    Ok(lat)
}

/// Writes `zeros` over the first `total` bytes of `file` (rounded up to 4 KiB), then
/// fdatasyncs: later writes there land in written blocks.
async fn write_zeros_synced(file: &SegmentFile, total: u64, zeros: &[u8]) -> anyhow::Result<()> {
    let mut pos = 0;
    while pos < total {
        let n = (total - pos).min(zeros.len() as u64).next_multiple_of(4096);
        file.write_aligned(pos, &zeros[..n as usize])
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        pos += n;
    }
    file.fdatasync().await.map_err(|e| anyhow::anyhow!("{e:?}"))
}

/// Appends of `size` bytes at increasing positions, each followed by fdatasync, into
/// `fallocate`d space, or (`zeroed`) into blocks written with zeros and synced first.
async fn sync_latency(
    work: &Path,
    size: usize,
    samples: usize,
    zeroed: bool,
) -> anyhow::Result<Latency> {
    let path = work.join(format!("raw-sync-{size}"));
    let file = SegmentFile::create(&path, WriteSync::Fdatasync).await?;
    let total = (size * samples) as u64;
    file.preallocate(total)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    if zeroed {
        write_zeros_synced(&file, total, &vec![0u8; 1 << 20]).await?;
    }
    let data = vec![0x5Au8; size];
    let mut lat = Latency::new();
    for i in 0..samples {
        let t = Instant::now();
        file.write_aligned((i * size) as u64, &data)
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        file.fdatasync()
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        lat.record(t.elapsed());
    }
    file.close().await?;
    std::fs::remove_file(&path)?;
    Ok(lat)
}

struct EngineResult {
    mib_s: f64,
    flush: Latency,
}

/// One engine case: `partitions` logs, each appending `per_flush` batches of about
/// `batch_bytes` per flush while the previous flush is in flight, for `secs` seconds;
/// with `rounds`, all logs flush together (`flush_rounds`).
async fn engine_case(
    dir: &Path,
    (partitions, batch_bytes, per_flush, rounds): (usize, usize, usize, bool),
    secs: f64,
) -> anyhow::Result<EngineResult> {
    let cache = Rc::new(BatchCache::new(64 << 20));
    let mut logs = Vec::with_capacity(partitions);
    for p in 0..partitions {
        let cfg = LogConfig::default();
        logs.push(
            Log::open(
                &dir.join(format!("p{p}")),
                cfg,
                Rc::new(SystemClock),
                cache.clone(),
            )
            .await?,
        );
    }
    let batch = make_batch(batch_bytes);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    if rounds {
        return flush_in_rounds(&logs, &batch, per_flush, deadline, start).await;
    }
    let runs = logs.iter().map(|log| {
        let batch = batch.clone();
        async move {
            let mut flush = Latency::new();
            let mut bytes = 0u64;
            let entry = AppendEntry {
                term: RaftTerm(1),
                kind: FrameKind::Data,
                body: batch,
            };
            let append_some = |bytes: &mut u64| -> anyhow::Result<()> {
                for _ in 0..per_flush {
                    log.append_one(&entry)?;
                    *bytes += entry.body.len() as u64;
                }
                Ok(())
            };
            append_some(&mut bytes)?;
            // As in the broker, the next appends overlap the flush in flight.
            while Instant::now() < deadline {
                let t = Instant::now();
                let Some(job) = log.begin_flush()? else {
                    continue;
                };
                let (outcome, appended) = futures::join!(job.run(), async {
                    futures::pending!();
                    append_some(&mut bytes)
                });
                log.complete_flush(outcome)?;
                flush.record(t.elapsed());
                appended?;
            }
            log.flush().await?;
            anyhow::Ok((bytes, flush))
        }
    });
    let results = join_all(runs).await;
    let elapsed = start.elapsed().as_secs_f64();
    let mut total = 0u64;
    let mut flush = Latency::new();
    for r in results {
        let (bytes, l) = r?;
        total += bytes;
        flush.merge(&l);
    }
    Ok(EngineResult {
        mib_s: total as f64 / MIB / elapsed,
        flush,
    })
}

/// The engine case with every log's flush begun in the same turn and all awaited
/// together, round after round; each flush's latency is its round's.
async fn flush_in_rounds(
    logs: &[Log],
    batch: &Bytes,
    per_flush: usize,
    deadline: Instant,
    start: Instant,
) -> anyhow::Result<EngineResult> {
    let entry = AppendEntry {
        term: RaftTerm(1),
        kind: FrameKind::Data,
        body: batch.clone(),
    };
    let mut total = 0u64;
    let append_all = |total: &mut u64| -> anyhow::Result<()> {
        for log in logs {
            for _ in 0..per_flush {
                log.append_one(&entry)?;
                *total += entry.body.len() as u64;
            }
        }
        Ok(())
    };
    append_all(&mut total)?;
    let mut flush = Latency::new();
    while Instant::now() < deadline {
        let t = Instant::now();
        let mut jobs = Vec::new();
        for log in logs {
            jobs.push(log.begin_flush()?);
        }
        let runs = join_all(jobs.into_iter().map(|j| async move {
            match j {
                Some(j) => Some(j.run().await),
                None => None,
            }
        }));
        let (outcomes, appended) = futures::join!(runs, async {
            futures::pending!();
            append_all(&mut total)
        });
        for (log, o) in logs.iter().zip(outcomes) {
            if let Some(o) = o {
                log.complete_flush(o)?;
                flush.record(t.elapsed());
            }
        }
        appended?;
    }
    for log in logs {
        log.flush().await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(EngineResult {
        mib_s: total as f64 / MIB / elapsed,
        flush,
    })
}

/// One batch of about `bytes` bytes (a single record).
fn make_batch(bytes: usize) -> Bytes {
    let mut b = BatchBuilder::new(0);
    let value = vec![0x42u8; bytes.saturating_sub(80).max(1)];
    b.push(0, None, Some(&value), &[]);
    b.build()
}
