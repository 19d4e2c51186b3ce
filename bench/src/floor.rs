//! `strand-bench floor`: the replicated-write floor of this machine — what the simplest
//! program that does an acks=all, replication-factor-3 write achieves here, with nothing
//! of a broker around it.
//!
//! Three "nodes" (threads of this process: a leader and two followers, each with its own
//! O_DIRECT + O_DSYNC file in `--dir`) talk over loopback TCP. A client sends fixed-size
//! records to the leader at a fixed rate (open loop); the leader forwards each record to
//! both followers as it arrives and writes it to its own file (group commit: every record
//! that arrived during the previous write goes into the next one); each follower writes
//! what it received the same way and acknowledges it; the leader answers the client once
//! its own write and one follower's are durable (a majority of three). Latency runs from
//! each record's scheduled send time to its answer, so a stall delays every record behind
//! it (no coordinated omission).
//!
//! Invariant: the floor does every step a replicated write needs (one durable write per
//! node, leader → follower → leader, client → leader → client) and nothing else — no
//! framing beyond a sequence number, no checksums, no Raft, no metadata — with blocking
//! I/O on dedicated threads. A broker's replicated produce on the same machine cannot be
//! expected below it; `fdatasync p99 + 2 rtt p99` measured alone assumes nodes that share
//! neither disk nor CPU, which three nodes on one machine do.

use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::disk::check_direct_io;
use crate::physics::PhysicsReport;
use crate::stats::{Latency, Percentiles};

/// Block alignment of O_DIRECT writes (and the unit a write is padded to).
const BLOCK_BYTES: usize = 4096;
/// Size of each node's file; writes wrap around to its start (the blocks stay written, so
/// every write overwrites zeroed or earlier data, as a broker's preallocated segment).
const FILE_BYTES: usize = 32 << 20;
/// Bytes of the sequence number in front of each record and of an acknowledgement.
const SEQ_BYTES: usize = 8;
/// Most record bytes one node write takes (group commit cap).
const WRITE_BYTES_MAX: usize = 1 << 20;
/// Largest record the floor sends.
const RECORD_BYTES_MAX: usize = 1 << 20;
/// How long the client waits for the answers after its last send.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug, Clone)]
pub struct FloorArgs {
    /// Directory for the three nodes' files (O_DIRECT; the data directory's disk).
    #[arg(long, default_value = "data/bench-floor")]
    pub dir: PathBuf,
    /// Measure even if the directory cannot do O_DIRECT (the figures then mean little).
    #[arg(long)]
    pub allow_buffered: bool,
    /// Records per second the client sends.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Payload bytes of each record.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Seconds sent before the measured ones and not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// A physics report (`strand-bench physics --out`) to print the floor's ratios to.
    #[arg(long)]
    pub physics: Option<PathBuf>,
    /// Writes the result as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The floor's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FloorReport {
    pub rate: f64,
    pub record_bytes: usize,
    pub direct_io: bool,
    /// Scheduled send → majority-durable answer, measured records only.
    pub latency: Percentiles,
    /// Node writes (any node), each of one or more records.
    pub node_write: Percentiles,
    /// Records per node write, mean (group commit at work).
    pub records_per_write: f64,
    /// CPU time (user + system) of all three nodes and the client per record sent,
    /// warm-up included: what the work costs on this machine's CPUs.
    pub cpu_us_per_record: f64,
}

/// Runs `strand-bench floor`.
pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    let report = measure(&args)?;
    print!("{}", table(&report));
    if let Some(p) = &args.physics {
        let ph = PhysicsReport::load(p)?;
        let bound_us = ph.small_sync_p99_us() + 2 * ph.rtt.p99_us;
        for (name, v) in [
            ("p50", report.latency.p50_us),
            ("p99", report.latency.p99_us),
            ("p99.9", report.latency.p999_us),
        ] {
            println!(
                "  floor {name:<6} {:>8.3} ms / fdatasync p99 + 2 rtt p99 {:>8.3} ms = {:>6.2}x",
                v as f64 / 1000.0,
                bound_us as f64 / 1000.0,
                v as f64 / bound_us.max(1) as f64
            );
        }
    }
    if let Some(out) = &args.out {
        crate::physics::write_json(out, &report, "floor")?;
    }
    Ok(())
}

/// The report as a table.
pub fn table(r: &FloorReport) -> String {
    use crate::physics::{latency_header, latency_row};
    let mut s = format!(
        "# replicated-write floor: 3 nodes on this machine, {} B records at {}/s, acks=all{}\n",
        r.record_bytes,
        r.rate,
        if r.direct_io {
            ""
        } else {
            " (BUFFERED: not the disk)"
        }
    );
    s += &latency_header(28);
    s += &latency_row("replicated write (floor)", &r.latency, 28);
    s += &latency_row("  one node's durable write", &r.node_write, 28);
    s += &format!(
        "records per node write (group commit): {:.2}; CPU (3 nodes and the client): {:.0} us \
         per record\n",
        r.records_per_write, r.cpu_us_per_record
    );
    s
}

/// Measures the floor.
pub fn measure(args: &FloorArgs) -> anyhow::Result<FloorReport> {
    anyhow::ensure!(
        args.rate > 0.0 && args.rate.is_finite(),
        "--rate must be positive"
    );
    anyhow::ensure!(
        (1..=RECORD_BYTES_MAX).contains(&args.record_bytes),
        "--record-bytes must be 1..={RECORD_BYTES_MAX}"
    );
    anyhow::ensure!(
        args.duration_s > 0.0 && args.warmup_s >= 0.0,
        "--duration-s must be positive and --warmup-s not negative"
    );
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let direct_io = check_direct_io(&args.dir, args.allow_buffered, "--allow-buffered")?;
    let frame_bytes = SEQ_BYTES + args.record_bytes;
    let writes = Arc::new(Mutex::new(WriteStats::default()));

    let mut files = Vec::new();
    for name in ["leader", "follower-1", "follower-2"] {
        files.push(NodeFile::create(
            &args.dir.join(format!("floor-{name}")),
            direct_io,
        )?);
    }
    let [leader_file, f1_file, f2_file] =
        <[NodeFile; 3]>::try_from(files).map_err(|_| anyhow::anyhow!("three node files"))?;
    let f1 = start_follower(f1_file, frame_bytes, writes.clone())?;
    let f2 = start_follower(f2_file, frame_bytes, writes.clone())?;
    let leader = start_leader(leader_file, frame_bytes, [f1, f2], writes.clone())?;

    let cpu_before = process_cpu()?;
    let (latency, sent) = run_client(&leader, args)?;
    let cpu = process_cpu()?.saturating_sub(cpu_before);
    let w = writes
        .lock()
        .map_err(|_| anyhow::anyhow!("a node failed"))?;
    let report = FloorReport {
        rate: args.rate,
        record_bytes: args.record_bytes,
        direct_io,
        latency: latency.percentiles(),
        node_write: w.latency.percentiles(),
        records_per_write: w.records as f64 / w.latency.len().max(1) as f64,
        cpu_us_per_record: cpu.as_secs_f64() * 1e6 / sent.max(1) as f64,
    };
    for name in ["leader", "follower-1", "follower-2"] {
        let _ = std::fs::remove_file(args.dir.join(format!("floor-{name}")));
    }
    Ok(report)
}

/// Clock ticks per second of /proc's CPU times (USER_HZ: 100 on Linux whatever the
/// kernel's internal tick rate).
const PROC_TICKS_PER_S: u64 = 100;

/// User + system CPU time of this process so far (from /proc/self/stat, 10 ms steps).
fn process_cpu() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    // Fields after the command name (which may hold spaces) start with the state (3rd).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/self/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .context("malformed /proc/self/stat")
    };
    // utime and stime are fields 14 and 15: 11 and 12 after the state.
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_millis(total * 1000 / PROC_TICKS_PER_S))
}

/// Node writes seen by all nodes.
#[derive(Default)]
struct WriteStats {
    latency: Latency,
    records: u64,
}

/// A node's O_DIRECT + O_DSYNC file, written in aligned blocks at a position that wraps.
struct NodeFile {
    file: std::fs::File,
    pos: usize,
    buf: AlignedBuf,
}

impl NodeFile {
    /// Creates the file and writes it full of zeros (so later writes allocate nothing).
    fn create(path: &Path, direct_io: bool) -> anyhow::Result<NodeFile> {
        let mut flags = libc::O_DSYNC;
        if direct_io {
            flags |= libc::O_DIRECT;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(flags)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        let buf = AlignedBuf::zeroed(WRITE_BYTES_MAX + RECORD_BYTES_MAX + BLOCK_BYTES)?;
        let mut at = 0;
        while at < FILE_BYTES {
            let n = (FILE_BYTES - at).min(buf.len());
            file.write_all_at(&buf.as_slice()[..n], at as u64)
                .with_context(|| format!("zeroing {}", path.display()))?;
            at += n;
        }
        Ok(NodeFile { file, pos: 0, buf })
    }

    /// Writes `records` (whole frames) durably at the next aligned position.
    fn write(&mut self, records: &[u8]) -> std::io::Result<()> {
        let len = records.len().next_multiple_of(BLOCK_BYTES);
        if self.pos + len > FILE_BYTES {
            self.pos = 0;
        }
        let buf = self.buf.as_mut_slice();
        buf[..records.len()].copy_from_slice(records);
        buf[records.len()..len].fill(0);
        self.file
            .write_all_at(&self.buf.as_slice()[..len], self.pos as u64)?;
        self.pos += len;
        Ok(())
    }
}

/// A heap buffer aligned for O_DIRECT: a window of a larger vector, starting at its
/// first aligned byte (the vector never grows, so the window never moves).
struct AlignedBuf {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> anyhow::Result<AlignedBuf> {
        let bytes = vec![0u8; len + BLOCK_BYTES];
        let start = bytes.as_ptr().align_offset(BLOCK_BYTES);
        anyhow::ensure!(start < BLOCK_BYTES, "cannot align a buffer");
        Ok(AlignedBuf { bytes, start, len })
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// Frames received and not yet written, handed from a node's reader to its writer.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    last_seq: u64,
    closed: bool,
}

type Shared<T> = Arc<(Mutex<T>, Condvar)>;

/// Reads whole frames from `from` and hands each to `each` with its sequence number.
fn read_frames(
    from: TcpStream,
    frame_bytes: usize,
    mut each: impl FnMut(u64, &[u8]),
) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(256 * 1024, from);
    let mut frame = vec![0u8; frame_bytes];
    loop {
        match r.read_exact(&mut frame) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut seq = [0u8; SEQ_BYTES];
        seq.copy_from_slice(&frame[..SEQ_BYTES]);
        each(u64::from_le_bytes(seq), &frame);
    }
}

/// Hands frames to the writer thread.
fn enqueue(pending: &Shared<Pending>, seq: u64, frame: &[u8]) {
    let (m, cv) = &**pending;
    let Ok(mut p) = m.lock() else { return };
    p.bytes.extend_from_slice(frame);
    p.last_seq = seq;
    cv.notify_one();
}

fn close(pending: &Shared<Pending>) {
    let (m, cv) = &**pending;
    if let Ok(mut p) = m.lock() {
        p.closed = true;
    }
    cv.notify_one();
}

/// The writer loop of a node: writes everything pending in one durable write, then calls
/// `durable` with the last sequence number written. Ends when the reader closed.
fn write_loop(
    mut file: NodeFile,
    pending: Shared<Pending>,
    writes: Arc<Mutex<WriteStats>>,
    frame_bytes: usize,
    mut durable: impl FnMut(u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (m, cv) = &*pending;
    let mut batch = Vec::with_capacity(WRITE_BYTES_MAX);
    loop {
        let last = {
            let mut p = m.lock().map_err(|_| std::io::Error::other("poisoned"))?;
            while p.bytes.is_empty() && !p.closed {
                p = cv.wait(p).map_err(|_| std::io::Error::other("poisoned"))?;
            }
            if p.bytes.is_empty() {
                return Ok(());
            }
            // At most WRITE_BYTES_MAX of whole frames; the rest waits for the next write.
            let take = p
                .bytes
                .len()
                .min((WRITE_BYTES_MAX / frame_bytes).max(1) * frame_bytes);
            batch.clear();
            batch.extend(p.bytes.drain(..take));
            let in_queue = (p.bytes.len() / frame_bytes) as u64;
            p.last_seq - in_queue
        };
        let t = Instant::now();
        file.write(&batch)?;
        let took = t.elapsed();
        if let Ok(mut w) = writes.lock() {
            w.latency.record(took);
            w.records += (batch.len() / frame_bytes) as u64;
        }
        durable(last)?;
    }
}

/// A follower: accepts the leader's connection, writes what it receives, acknowledges
/// the last durable sequence number. Returns the address to connect to.
fn start_follower(
    file: NodeFile,
    frame_bytes: usize,
    writes: Arc<Mutex<WriteStats>>,
) -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?.to_string();
    std::thread::Builder::new()
        .name("floor-follower".into())
        .spawn(move || -> std::io::Result<()> {
            let (c, _) = l.accept()?;
            c.set_nodelay(true)?;
            let mut ack = c.try_clone()?;
            let pending: Shared<Pending> = Arc::default();
            let p = pending.clone();
            let writer = std::thread::Builder::new()
                .name("floor-follower-write".into())
                .spawn(move || {
                    write_loop(file, p, writes, frame_bytes, |seq| {
                        ack.write_all(&seq.to_le_bytes())
                    })
                })?;
            let read = read_frames(c, frame_bytes, |seq, f| enqueue(&pending, seq, f));
            close(&pending);
            let _ = writer.join();
            read
        })?;
    Ok(addr)
}

/// What the leader knows is durable where.
#[derive(Default)]
struct Commit {
    leader: u64,
    followers: [u64; 2],
    closed: bool,
}

impl Commit {
    /// Durable on the leader and one follower: a majority of three.
    fn majority(&self) -> u64 {
        self.leader.min(self.followers[0].max(self.followers[1]))
    }
}

/// The leader: accepts the client, forwards each record to both followers and writes it,
/// answers with the last sequence number durable on a majority. Returns its address.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn start_leader(
    file: NodeFile,
    frame_bytes: usize,
    followers: [String; 2],
    writes: Arc<Mutex<WriteStats>>,
) -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?.to_string();
    let mut to_followers = Vec::new();
    let commit: Shared<Commit> = Arc::default();
    for (i, f) in followers.iter().enumerate() {
        let c = TcpStream::connect(f).with_context(|| format!("connecting to follower {f}"))?;
        c.set_nodelay(true)?;
        let mut acks = c.try_clone()?;
        to_followers.push(c);
        let commit = commit.clone();
        std::thread::Builder::new()
            .name("floor-leader-acks".into())
            .spawn(move || {
                let mut seq = [0u8; SEQ_BYTES];
                while acks.read_exact(&mut seq).is_ok() {
                    let (m, cv) = &*commit;
                    let Ok(mut c) = m.lock() else { return };
                    c.followers[i] = u64::from_le_bytes(seq);
                    cv.notify_one();
                }
            })?;
    }
    std::thread::Builder::new()
        .name("floor-leader".into())
        .spawn(move || -> std::io::Result<()> {
            let (client, _) = l.accept()?;
            client.set_nodelay(true)?;
            let mut answer = client.try_clone()?;
            let pending: Shared<Pending> = Arc::default();
            let (p, c) = (pending.clone(), commit.clone());
            let writer = std::thread::Builder::new()
                .name("floor-leader-write".into())
                .spawn(move || {
                    write_loop(file, p, writes, frame_bytes, |seq| {
                        let (m, cv) = &*c;
                        if let Ok(mut c) = m.lock() {
                            c.leader = seq;
                        }
                        cv.notify_one();
                        Ok(())
                    })
                })?;
            let c = commit.clone();
            let answers = std::thread::Builder::new()
                .name("floor-leader-answer".into())
                .spawn(move || -> std::io::Result<()> {
                    let (m, cv) = &*c;
                    let mut answered = 0;
                    loop {
                        let next = {
                            let mut s = m.lock().map_err(|_| std::io::Error::other("poisoned"))?;
                            while s.majority() <= answered && !s.closed {
                                s = cv.wait(s).map_err(|_| std::io::Error::other("poisoned"))?;
                            }
                            if s.majority() <= answered {
                                return Ok(());
                            }
                            s.majority()
                        };
                        answer.write_all(&next.to_le_bytes())?;
                        answered = next;
                    }
                })?;
            let read = read_frames(client, frame_bytes, |seq, f| {
                for to in &mut to_followers {
                    let _ = to.write_all(f);
                }
                enqueue(&pending, seq, f);
            });
            close(&pending);
            let _ = writer.join();
            {
                let (m, cv) = &*commit;
                if let Ok(mut s) = m.lock() {
                    s.closed = true;
                }
                cv.notify_all();
            }
            let _ = answers.join();
            read
        })?;
    Ok(addr)
}

/// Sends records at `args.rate` from sequence 1 and measures each from its scheduled send
/// time to the answer that covers it; the first `warmup_s` of records are not counted.
/// Returns the latency and the records sent.
fn run_client(leader: &str, args: &FloorArgs) -> anyhow::Result<(Latency, u64)> {
    let c = TcpStream::connect(leader).context("connecting to the floor's leader")?;
    c.set_nodelay(true)?;
    let mut answers = c.try_clone()?;
    answers.set_read_timeout(Some(DRAIN_TIMEOUT))?;
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let warmup = (args.warmup_s * args.rate).round() as u64;
    let total = warmup + (args.duration_s * args.rate).round().max(1.0) as u64;
    let start = Instant::now() + Duration::from_millis(10);
    let due = move |seq: u64| start + interval.mul_f64((seq - 1) as f64);

    let reader = std::thread::Builder::new()
        .name("floor-client-answers".into())
        .spawn(move || -> anyhow::Result<Latency> {
            let mut lat = Latency::new();
            let mut answered = 0u64;
            let mut seq = [0u8; SEQ_BYTES];
            while answered < total {
                answers
                    .read_exact(&mut seq)
                    .context("reading the leader's answer")?;
                let now = Instant::now();
                let upto = u64::from_le_bytes(seq).min(total);
                for s in answered + 1..=upto {
                    if s > warmup {
                        lat.record(now.saturating_duration_since(due(s)));
                    }
                }
                answered = answered.max(upto);
            }
            Ok(lat)
        })?;

    let mut w = c;
    let mut frame = vec![0x5Au8; SEQ_BYTES + args.record_bytes];
    for seq in 1..=total {
        let at = due(seq);
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        frame[..SEQ_BYTES].copy_from_slice(&seq.to_le_bytes());
        w.write_all(&frame)
            .context("sending to the floor's leader")?;
    }
    let lat = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the client's reader panicked"))??;
    let _ = w.shutdown(std::net::Shutdown::Write);
    Ok((lat, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_answers_every_record_after_a_majority_wrote_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = FloorArgs {
            dir: dir.path().join("floor"),
            allow_buffered: true,
            rate: 500.0,
            record_bytes: 100,
            duration_s: 0.4,
            warmup_s: 0.1,
            physics: None,
            out: None,
        };
        let r = measure(&args).expect("floor");
        assert_eq!(r.latency.count, 200, "every measured record answered once");
        // The leader and at least one follower wrote before the first answer.
        assert!(r.node_write.count >= 2, "{:?}", r.node_write);
        assert!(r.records_per_write >= 1.0, "{r:?}");
    }

    #[test]
    fn commit_is_the_leader_and_its_best_follower() {
        let c = Commit {
            leader: 7,
            followers: [3, 5],
            closed: false,
        };
        assert_eq!(c.majority(), 5);
        let c = Commit {
            leader: 4,
            followers: [3, 9],
            closed: false,
        };
        assert_eq!(c.majority(), 4);
        assert_eq!(Commit::default().majority(), 0);
    }
}
