//! The load loops: producers on a fixed schedule (open loop) or as fast as a bounded
//! in-flight window allows (closed loop, `--rate max`), and long-poll consumers.
//!
//! Invariant (coordinated omission): in open loop each record has an intended send time
//! on a fixed grid, fixed before anything is sent; its latency is measured from that
//! instant, however late the sender got to it. The uncorrected figure (from the moment
//! its request was written) is kept beside it only to show what a closed-loop tool would
//! report. Warm-up records are sent but never enter a histogram or a throughput figure.
//! Every failure is counted by kind; nothing is dropped silently.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::driver::{
    Acked, Acks, BoxFut, Codec, ConsumeSession, Driver, DriverError, OutRecord, PartitionBatch,
    ProduceSession, ProducerOpts, SentRequest, StartAt, TopicSpec,
};
use crate::stats::Latency;

/// How long the in-flight requests may take to finish after the run's end.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long e2e consumers keep reading after the producers finished.
const CONSUME_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one fetch may take before it counts as an error.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// e2e value header: magic, run id, intended send time (ns since the Unix epoch), all
/// big-endian. Records shorter than this cannot carry it.
pub const E2E_HEADER_BYTES: usize = 16;
const E2E_MAGIC: u32 = u32::from_be_bytes(*b"SBE1");
/// Longest run, so per-second series stay bounded.
pub const RUN_SECONDS_MAX: u64 = 3600;

/// Records per second.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Rate {
    /// Closed loop: as fast as the in-flight window allows.
    Max,
    /// Open loop: records per second over all producers.
    PerSec(f64),
}

/// How records are keyed (and so partitioned).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum KeyDist {
    /// No key; sticky partitioner (a partition until its batch is sent).
    None,
    /// A random 16-byte key; a random partition.
    Random,
}

/// Which loops a run starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    Produce,
    Consume,
    E2e,
}

/// Everything a run does.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LoadSpec {
    pub mode: Mode,
    pub topic: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub record_bytes: usize,
    pub keys: KeyDist,
    /// With random keys: how many distinct keys (0: every key new); key n goes to
    /// partition n % partitions, so a compacted topic has n's latest value in one place.
    #[serde(default)]
    pub key_space: u64,
    /// Configs of the topic when the run creates it.
    #[serde(default)]
    pub topic_configs: Vec<(String, String)>,
    pub codec: Codec,
    pub acks: Acks,
    pub producers: usize,
    pub consumers: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub rate: Rate,
    pub linger_ms: f64,
    pub batch_bytes: usize,
    pub max_in_flight: usize,
}

/// One second of a run (from the end of warm-up).
#[derive(Clone, Default)]
pub struct Second {
    pub acked_records: u64,
    pub acked_bytes: u64,
    pub consumed_records: u64,
    /// Latencies of records intended in this second (e2e: produce latency unless only
    /// consumers run, then e2e).
    pub latency: Option<Latency>,
}

/// What a producer measured.
#[derive(Default)]
pub struct ProduceStats {
    pub corrected: Latency,
    pub uncorrected: Latency,
    /// Write time minus intended time: how late the harness itself was.
    pub send_lag: Latency,
    pub acked_records: u64,
    pub acked_bytes: u64,
    pub failed_records: u64,
    pub warmup_records: u64,
    pub errors: BTreeMap<String, u64>,
    pub seconds: Vec<Second>,
}

/// What a consumer measured.
#[derive(Default)]
pub struct ConsumeStats {
    pub e2e: Latency,
    pub fetch: Latency,
    pub records: u64,
    pub bytes: u64,
    /// Records without this run's e2e header (another writer, or a previous run).
    pub foreign_records: u64,
    pub errors: BTreeMap<String, u64>,
    pub seconds: Vec<Second>,
    /// When the last record inside the measured window arrived (consume mode).
    pub last_record_at: Option<Instant>,
}

/// Counters the progress bar reads.
#[derive(Default)]
pub struct Progress {
    pub acked: AtomicU64,
    pub consumed: AtomicU64,
    pub errors: AtomicU64,
}

/// Maps instants to nanoseconds since the Unix epoch (monotonic within a run).
#[derive(Clone, Copy)]
pub struct Epoch {
    at: Instant,
    unix_ns: u64,
}

impl Epoch {
    /// Now.
    pub fn now() -> Epoch {
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Epoch {
            at: Instant::now(),
            unix_ns,
        }
    }

    /// `t` in ns since the Unix epoch.
    pub fn unix_ns(&self, t: Instant) -> u64 {
        let since =
            u64::try_from(t.saturating_duration_since(self.at).as_nanos()).unwrap_or(u64::MAX);
        self.unix_ns.saturating_add(since)
    }
}

/// Times of a run, shared by all its loops.
#[derive(Clone, Copy)]
pub struct Window {
    pub start: Instant,
    /// End of warm-up: measurement starts.
    pub measure_from: Instant,
    pub end: Instant,
    pub epoch: Epoch,
    pub run_id: u32,
}

impl Window {
    fn second_of(&self, t: Instant) -> Option<usize> {
        if t < self.measure_from {
            return None;
        }
        usize::try_from(t.duration_since(self.measure_from).as_secs())
            .ok()
            .filter(|&s| (s as u64) < RUN_SECONDS_MAX)
    }
}

fn second_mut(seconds: &mut Vec<Second>, s: usize) -> &mut Second {
    if seconds.len() <= s {
        seconds.resize_with(s + 1, Second::default);
    }
    &mut seconds[s]
}

fn count_error(errors: &mut BTreeMap<String, u64>, e: &DriverError, n: u64) {
    *errors.entry(e.kind()).or_default() += n;
}

/// A batch being filled, and the intended send time of each of its records.
struct OpenBatch {
    records: Vec<OutRecord>,
    intended: Vec<Instant>,
    bytes: usize,
    opened: Instant,
}

/// A request on the wire and what it carries.
struct Carried {
    intended: Vec<Vec<Instant>>,
    bytes: Vec<usize>,
    sent_at: Instant,
}

type Completion = (Result<Acked, DriverError>, Carried);

/// One producer's state between awaits.
struct Producer<'a> {
    spec: &'a LoadSpec,
    win: Window,
    partitions: i32,
    rng: StdRng,
    sticky: i32,
    open: BTreeMap<i32, OpenBatch>,
    template: Bytes,
    stats: ProduceStats,
    progress: &'a Progress,
}

impl Producer<'_> {
    fn new_value(&self, intended: Instant) -> Bytes {
        if self.spec.mode != Mode::E2e {
            return self.template.clone();
        }
        let mut v = BytesMut::with_capacity(self.template.len());
        v.put_u32(E2E_MAGIC);
        v.put_u32(self.win.run_id);
        v.put_u64(self.win.epoch.unix_ns(intended));
        v.extend_from_slice(&self.template[E2E_HEADER_BYTES..]);
        v.freeze()
    }

    /// Adds one record intended at `intended`; returns its partition.
    fn push(&mut self, intended: Instant, now: Instant) -> i32 {
        let (partition, key) = match self.spec.keys {
            KeyDist::None => (self.sticky, None),
            KeyDist::Random if self.spec.key_space > 0 => {
                let n = self.rng.gen_range(0..self.spec.key_space);
                let mut key = [0u8; 16];
                key[..8].copy_from_slice(&n.to_be_bytes());
                let partition = (n % u64::try_from(self.partitions.max(1)).unwrap_or(1)) as i32;
                (partition, Some(Bytes::copy_from_slice(&key)))
            }
            KeyDist::Random => {
                let key: [u8; 16] = self.rng.gen();
                (
                    self.rng.gen_range(0..self.partitions),
                    Some(Bytes::copy_from_slice(&key)),
                )
            }
        };
        let value = self.new_value(intended);
        let b = self.open.entry(partition).or_insert_with(|| OpenBatch {
            records: Vec::new(),
            intended: Vec::new(),
            bytes: 0,
            opened: now,
        });
        b.bytes += value.len() + key.as_ref().map_or(0, |k| k.len());
        b.records.push(OutRecord { key, value });
        b.intended.push(intended);
        partition
    }

    fn is_full(&self, partition: i32) -> bool {
        self.open
            .get(&partition)
            .is_some_and(|b| b.bytes >= self.spec.batch_bytes)
    }

    /// Takes the batches that are full or whose linger passed (all of them if `all`).
    fn take_ready(&mut self, now: Instant, all: bool) -> Vec<(i32, OpenBatch)> {
        let linger = Duration::from_secs_f64(self.spec.linger_ms / 1000.0);
        let ready: Vec<i32> = self
            .open
            .iter()
            .filter(|(_, b)| all || b.bytes >= self.spec.batch_bytes || b.opened + linger <= now)
            .map(|(&p, _)| p)
            .collect();
        let mut out = Vec::with_capacity(ready.len());
        for p in ready {
            if let Some(b) = self.open.remove(&p) {
                out.push((p, b));
            }
            if p == self.sticky {
                self.sticky = (self.sticky + 1) % self.partitions;
            }
        }
        out
    }

    fn next_linger_deadline(&self) -> Option<Instant> {
        let linger = Duration::from_secs_f64(self.spec.linger_ms / 1000.0);
        self.open.values().map(|b| b.opened + linger).min()
    }

    fn record(&mut self, done: Completion) {
        let (result, carried) = done;
        let failed: BTreeMap<usize, DriverError> = match result {
            Ok(acked) => {
                let failed: BTreeMap<usize, DriverError> = acked.failed.into_iter().collect();
                for (i, intended) in carried.intended.iter().enumerate() {
                    if failed.contains_key(&i) {
                        continue;
                    }
                    self.record_acked(intended, carried.bytes[i], carried.sent_at, acked.at);
                }
                failed
            }
            Err(e) => (0..carried.intended.len())
                .map(|i| (i, clone_error(&e)))
                .collect(),
        };
        for (i, e) in failed {
            let n = carried.intended.get(i).map_or(0, |v| v.len() as u64);
            self.stats.failed_records += n;
            count_error(&mut self.stats.errors, &e, n);
            self.progress.errors.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn record_acked(&mut self, intended: &[Instant], bytes: usize, sent_at: Instant, at: Instant) {
        let n = intended.len().max(1);
        let per_record_bytes = (bytes / n) as u64;
        self.progress
            .acked
            .fetch_add(intended.len() as u64, Ordering::Relaxed);
        for &t in intended {
            let Some(s) = self.win.second_of(t).filter(|_| t < self.win.end) else {
                self.stats.warmup_records += 1;
                continue;
            };
            let latency = at.saturating_duration_since(t);
            self.stats.corrected.record(latency);
            self.stats
                .uncorrected
                .record(at.saturating_duration_since(sent_at));
            self.stats
                .send_lag
                .record(sent_at.saturating_duration_since(t));
            self.stats.acked_records += 1;
            self.stats.acked_bytes += per_record_bytes;
            second_mut(&mut self.stats.seconds, s)
                .latency
                .get_or_insert_with(Latency::coarse)
                .record(latency);
            if let Some(a) = self.win.second_of(at) {
                let sec = second_mut(&mut self.stats.seconds, a);
                sec.acked_records += 1;
                sec.acked_bytes += per_record_bytes;
            }
        }
    }
}

/// A copy of an error for each batch of a failed request (io errors keep their kind).
fn clone_error(e: &DriverError) -> DriverError {
    match e {
        DriverError::Io { addr, source } => DriverError::Io {
            addr: addr.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        DriverError::ConnectionClosed { addr } => {
            DriverError::ConnectionClosed { addr: addr.clone() }
        }
        DriverError::Protocol(s) => DriverError::Protocol(s.clone()),
        DriverError::Broker { api, code, name } => DriverError::Broker {
            api,
            code: *code,
            name: name.clone(),
        },
        DriverError::Timeout(s) => DriverError::Timeout(s.clone()),
        DriverError::Unsupported(s) => DriverError::Unsupported(s.clone()),
    }
}

/// Sends `batches` and queues their answers in `inflight`; a failed send counts its
/// records as failed.
async fn send_batches(
    session: &mut dyn ProduceSession,
    p: &mut Producer<'_>,
    batches: Vec<(i32, OpenBatch)>,
    inflight: &mut FuturesUnordered<BoxFut<'static, Completion>>,
) {
    if batches.is_empty() {
        return;
    }
    let mut wire = Vec::with_capacity(batches.len());
    let mut intended = Vec::with_capacity(batches.len());
    for (partition, b) in batches {
        intended.push((b.intended, b.bytes));
        wire.push(PartitionBatch {
            partition,
            records: b.records,
        });
    }
    match session.send(&wire).await {
        Ok(sent) => {
            for SentRequest {
                batch_indices,
                sent_at,
                answer,
            } in sent
            {
                let carried = Carried {
                    intended: batch_indices
                        .iter()
                        .map(|&i| intended[i].0.clone())
                        .collect(),
                    bytes: batch_indices.iter().map(|&i| intended[i].1).collect(),
                    sent_at,
                };
                inflight.push(Box::pin(answer.map(move |r| (r, carried))));
            }
        }
        Err(e) => {
            let n: u64 = intended.iter().map(|(v, _)| v.len() as u64).sum();
            p.stats.failed_records += n;
            count_error(&mut p.stats.errors, &e, n);
            p.progress.errors.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Sends `partition`'s batch if it is full.
async fn send_if_full(
    session: &mut dyn ProduceSession,
    p: &mut Producer<'_>,
    partition: i32,
    inflight: &mut FuturesUnordered<BoxFut<'static, Completion>>,
) {
    if !p.is_full(partition) {
        return;
    }
    if let Some(b) = p.open.remove(&partition) {
        if partition == p.sticky {
            p.sticky = (p.sticky + 1) % p.partitions;
        }
        send_batches(session, p, vec![(partition, b)], inflight).await;
    }
}

/// Shortest pause of a pacer thread: above this rate, records are due in groups.
const PACER_TICK_MIN: Duration = Duration::from_micros(100);

/// Wakes an open-loop producer at its grid times from a thread with `nanosleep`
/// precision (tokio's timer rounds up to whole milliseconds, which would be the
/// harness's lateness, not the broker's). The thread ends at the window's end or when
/// the pacer is dropped.
struct Pacer {
    notify: Arc<tokio::sync::Notify>,
    stop: Arc<AtomicBool>,
}

impl Pacer {
    fn start(first: Instant, period: Duration, end: Instant) -> Pacer {
        let notify = Arc::new(tokio::sync::Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (n, st) = (notify.clone(), stop.clone());
        let step = period.max(PACER_TICK_MIN);
        std::thread::spawn(move || {
            let mut next = first;
            while next < end && !st.load(Ordering::Relaxed) {
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
                // Stores a permit if the producer is busy: no wake is lost.
                n.notify_one();
                next += step;
            }
        });
        Pacer { notify, stop }
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One producer: sends until the window ends, then waits (up to [`DRAIN_TIMEOUT`]) for
/// its requests in flight.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn produce_loop(
    mut session: Box<dyn ProduceSession>,
    spec: Arc<LoadSpec>,
    win: Window,
    index: usize,
    partitions: i32,
    progress: Arc<Progress>,
) -> ProduceStats {
    let producers = spec.producers.max(1);
    let mut p = Producer {
        spec: &spec,
        win,
        partitions: partitions.max(1),
        rng: StdRng::seed_from_u64(rand::thread_rng().gen()),
        sticky: (index as i32) % partitions.max(1),
        open: BTreeMap::new(),
        template: Bytes::from(vec![0x5Au8; spec.record_bytes]),
        stats: ProduceStats::default(),
        progress: &progress,
    };
    // Open loop: this producer's grid, staggered so producers interleave.
    let period = match spec.rate {
        Rate::PerSec(r) => Some(Duration::from_secs_f64(producers as f64 / r.max(1e-3))),
        Rate::Max => None,
    };
    let mut next =
        win.start + period.map_or(Duration::ZERO, |d| d * index as u32 / producers as u32);
    let pacer = period.map(|d| Pacer::start(next, d, win.end));
    let mut inflight: FuturesUnordered<BoxFut<'static, Completion>> = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        if now >= win.end {
            break;
        }
        match period {
            Some(period) => {
                while next <= now && next < win.end {
                    let partition = p.push(next, now);
                    next += period;
                    // A sender catching up sends full batches as it goes: memory stays
                    // bounded by a batch per partition plus the in-flight window.
                    send_if_full(session.as_mut(), &mut p, partition, &mut inflight).await;
                }
            }
            None if inflight.len() < spec.max_in_flight.max(1) => {
                // Closed loop: a full batch, made now, whenever a slot is free.
                loop {
                    let partition = p.push(now, now);
                    if p.is_full(partition) {
                        break;
                    }
                }
            }
            None => {}
        }
        let ready = p.take_ready(now, false);
        send_batches(session.as_mut(), &mut p, ready, &mut inflight).await;
        while let Some(Some(done)) = inflight.next().now_or_never() {
            p.record(done);
        }
        let mut wake = win.end;
        if period.is_some() {
            // Only a fallback: the pacer wakes us on time.
            wake = wake.min(next + Duration::from_millis(2));
        }
        if let Some(d) = p.next_linger_deadline() {
            wake = wake.min(d);
        }
        let closed_loop_has_room = period.is_none() && inflight.len() < spec.max_in_flight.max(1);
        if closed_loop_has_room {
            continue;
        }
        let paced = async {
            match &pacer {
                Some(pc) => pc.notify.notified().await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            Some(done) = inflight.next(), if !inflight.is_empty() => p.record(done),
            _ = paced => {}
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
        }
    }
    // Records due before the end that a late sender has not made yet are still sent
    // (with their intended times): dropping them would hide the lateness.
    if let Some(period) = period {
        let now = Instant::now();
        while next < win.end {
            let partition = p.push(next, now);
            next += period;
            send_if_full(session.as_mut(), &mut p, partition, &mut inflight).await;
        }
    }
    drop(pacer);
    let rest = p.take_ready(Instant::now(), true);
    send_batches(session.as_mut(), &mut p, rest, &mut inflight).await;
    let drain = tokio::time::sleep(DRAIN_TIMEOUT);
    tokio::pin!(drain);
    loop {
        tokio::select! {
            next = inflight.next() => match next {
                Some(done) => p.record(done),
                None => break,
            },
            _ = &mut drain => {
                let e = DriverError::Timeout(format!("no answer {DRAIN_TIMEOUT:?} after the run"));
                let n = inflight.len() as u64;
                count_error(&mut p.stats.errors, &e, n);
                p.stats.failed_records += n;
                break;
            }
        }
    }
    p.stats
}

/// Whether e2e consumers may stop: set when producers are done and everything acked
/// was read, or the drain deadline passed.
pub struct ConsumeStop {
    pub producers_done: AtomicBool,
    pub acked_total: AtomicU64,
    pub consumed_total: AtomicU64,
}

/// One consumer: polls until the window ends (consume) or until everything acknowledged
/// was read back (e2e, up to [`CONSUME_DRAIN_TIMEOUT`] after the producers).
pub async fn consume_loop(
    mut session: Box<dyn ConsumeSession>,
    spec: Arc<LoadSpec>,
    win: Window,
    stop: Arc<ConsumeStop>,
    progress: Arc<Progress>,
) -> ConsumeStats {
    let mut st = ConsumeStats::default();
    let e2e = spec.mode == Mode::E2e;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if !e2e && now >= win.end {
            break;
        }
        if e2e && stop.producers_done.load(Ordering::Acquire) {
            let deadline = *drain_deadline.get_or_insert(now + CONSUME_DRAIN_TIMEOUT);
            let all_read = stop.consumed_total.load(Ordering::Acquire)
                >= stop.acked_total.load(Ordering::Acquire);
            if all_read || now >= deadline {
                break;
            }
        }
        let asked = Instant::now();
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, session.poll()).await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                count_error(&mut st.errors, &e, 1);
                progress.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                count_error(&mut st.errors, &DriverError::Timeout("fetch".into()), 1);
                progress.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let at = fetched.at.unwrap_or_else(Instant::now);
        for e in &fetched.errors {
            count_error(&mut st.errors, e, 1);
        }
        if win.second_of(asked).is_some() {
            st.fetch.record(at.saturating_duration_since(asked));
        }
        progress
            .consumed
            .fetch_add(fetched.records, Ordering::Relaxed);
        if e2e {
            record_e2e(&mut st, &fetched.values, at, &win, &stop);
        } else if let Some(s) = win.second_of(at).filter(|_| at < win.end) {
            if fetched.records > 0 {
                st.last_record_at = Some(at);
            }
            st.records += fetched.records;
            st.bytes += fetched.bytes;
            second_mut(&mut st.seconds, s).consumed_records += fetched.records;
        }
    }
    st
}

fn record_e2e(
    st: &mut ConsumeStats,
    values: &[Bytes],
    at: Instant,
    win: &Window,
    stop: &ConsumeStop,
) {
    let at_ns = win.epoch.unix_ns(at);
    let from_ns = win.epoch.unix_ns(win.measure_from);
    let end_ns = win.epoch.unix_ns(win.end);
    let mut ours = 0u64;
    for v in values {
        let Some(h) = v.get(..E2E_HEADER_BYTES) else {
            st.foreign_records += 1;
            continue;
        };
        let word = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if word(0) != E2E_MAGIC || word(4) != win.run_id {
            st.foreign_records += 1;
            continue;
        }
        ours += 1;
        let intended_ns = (u64::from(word(8)) << 32) | u64::from(word(12));
        if intended_ns < from_ns || intended_ns >= end_ns {
            continue;
        }
        let latency = Duration::from_nanos(at_ns.saturating_sub(intended_ns));
        st.e2e.record(latency);
        st.records += 1;
        st.bytes += v.len() as u64;
        let s = usize::try_from((intended_ns - from_ns) / 1_000_000_000).unwrap_or(usize::MAX);
        if (s as u64) < RUN_SECONDS_MAX {
            let sec = second_mut(&mut st.seconds, s);
            sec.consumed_records += 1;
            sec.latency
                .get_or_insert_with(Latency::coarse)
                .record(latency);
        }
    }
    stop.consumed_total.fetch_add(ours, Ordering::AcqRel);
}

/// What a whole run measured.
pub struct RunStats {
    pub produce: ProduceStats,
    pub consume: ConsumeStats,
    pub partitions: i32,
    /// Seconds measured (after warm-up).
    pub measured_s: f64,
    /// Consume mode: the seconds after which the consumers read nothing more, when they
    /// went idle at least `DRAINED_IDLE` before the window ended (the topic was read to
    /// its end sooner than the run lasted).
    pub drained_s: Option<f64>,
}

/// How long before the window's end consumers must have read their last record for the
/// topic to count as drained.
const DRAINED_IDLE: Duration = Duration::from_secs(1);

/// [`RunStats::drained_s`] of a window measured from `measure_from` to `end` whose last
/// record arrived at `last_record_at`.
pub fn drained_after(
    last_record_at: Option<Instant>,
    measure_from: Instant,
    end: Instant,
) -> Option<f64> {
    let last = last_record_at?;
    (end.saturating_duration_since(last) >= DRAINED_IDLE)
        .then(|| last.saturating_duration_since(measure_from).as_secs_f64())
}

fn merge_produce(into: &mut ProduceStats, s: ProduceStats) {
    into.corrected.merge(&s.corrected);
    into.uncorrected.merge(&s.uncorrected);
    into.send_lag.merge(&s.send_lag);
    into.acked_records += s.acked_records;
    into.acked_bytes += s.acked_bytes;
    into.failed_records += s.failed_records;
    into.warmup_records += s.warmup_records;
    merge_seconds(&mut into.seconds, s.seconds);
    for (k, v) in s.errors {
        *into.errors.entry(k).or_default() += v;
    }
}

fn merge_consume(into: &mut ConsumeStats, s: ConsumeStats) {
    into.e2e.merge(&s.e2e);
    into.fetch.merge(&s.fetch);
    into.records += s.records;
    into.bytes += s.bytes;
    into.foreign_records += s.foreign_records;
    into.last_record_at = into.last_record_at.max(s.last_record_at);
    merge_seconds(&mut into.seconds, s.seconds);
    for (k, v) in s.errors {
        *into.errors.entry(k).or_default() += v;
    }
}

fn merge_seconds(into: &mut Vec<Second>, from: Vec<Second>) {
    for (i, s) in from.into_iter().enumerate() {
        let t = second_mut(into, i);
        t.acked_records += s.acked_records;
        t.acked_bytes += s.acked_bytes;
        t.consumed_records += s.consumed_records;
        if let Some(l) = s.latency {
            t.latency.get_or_insert_with(Latency::coarse).merge(&l);
        }
    }
}

/// Sets up the topic and sessions, runs the loops, and merges what they measured.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn run(
    driver: Arc<dyn Driver>,
    spec: LoadSpec,
    progress: Arc<Progress>,
) -> Result<RunStats, DriverError> {
    if spec.mode == Mode::E2e && spec.record_bytes < E2E_HEADER_BYTES {
        return Err(DriverError::Unsupported(format!(
            "e2e records carry a {E2E_HEADER_BYTES}-byte header: --record-bytes must be at least that"
        )));
    }
    if spec.duration_s + spec.warmup_s > RUN_SECONDS_MAX as f64 || spec.duration_s <= 0.0 {
        return Err(DriverError::Unsupported(format!(
            "duration must be in (0, {RUN_SECONDS_MAX}] s with warm-up"
        )));
    }
    let spec = Arc::new(spec);
    let topic = TopicSpec {
        name: spec.topic.clone(),
        partitions: spec.partitions,
        replication_factor: spec.replication_factor,
        configs: spec.topic_configs.clone(),
    };
    let partitions = driver.ensure_topic(&topic).await?;
    let opts = ProducerOpts {
        topic: spec.topic.clone(),
        acks: spec.acks,
        codec: spec.codec,
        max_in_flight: spec.max_in_flight,
    };
    let n_producers = if spec.mode == Mode::Consume {
        0
    } else {
        spec.producers
    };
    let n_consumers = if spec.mode == Mode::Produce {
        0
    } else {
        spec.consumers.max(1)
    };
    let mut producers = Vec::with_capacity(n_producers);
    for _ in 0..n_producers {
        producers.push(driver.producer(&opts).await?);
    }
    let start_at = if spec.mode == Mode::E2e {
        StartAt::Latest
    } else {
        StartAt::Earliest
    };
    let mut consumers = Vec::with_capacity(n_consumers);
    for c in 0..n_consumers {
        let mine: Vec<i32> = (0..partitions)
            .filter(|p| (*p as usize) % n_consumers == c)
            .collect();
        if mine.is_empty() {
            continue;
        }
        consumers.push(
            driver
                .consumer(&spec.topic, mine, start_at, spec.mode == Mode::E2e)
                .await?,
        );
    }
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(spec.warmup_s);
    let win = Window {
        start,
        measure_from,
        end: measure_from + Duration::from_secs_f64(spec.duration_s),
        epoch: Epoch::now(),
        run_id: rand::thread_rng().gen(),
    };
    let stop = Arc::new(ConsumeStop {
        producers_done: AtomicBool::new(false),
        acked_total: AtomicU64::new(0),
        consumed_total: AtomicU64::new(0),
    });
    let consumer_tasks: Vec<_> = consumers
        .into_iter()
        .map(|s| {
            tokio::spawn(consume_loop(
                s,
                spec.clone(),
                win,
                stop.clone(),
                progress.clone(),
            ))
        })
        .collect();
    let producer_tasks: Vec<_> = producers
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            tokio::spawn(produce_loop(
                s,
                spec.clone(),
                win,
                i,
                partitions,
                progress.clone(),
            ))
        })
        .collect();
    let mut produce = ProduceStats::default();
    for t in producer_tasks {
        let s = t
            .await
            .map_err(|e| DriverError::Protocol(format!("producer task: {e}")))?;
        merge_produce(&mut produce, s);
    }
    stop.acked_total.store(
        produce.acked_records + produce.warmup_records,
        Ordering::Release,
    );
    stop.producers_done.store(true, Ordering::Release);
    let mut consume = ConsumeStats::default();
    for t in consumer_tasks {
        let s = t
            .await
            .map_err(|e| DriverError::Protocol(format!("consumer task: {e}")))?;
        merge_consume(&mut consume, s);
    }
    if spec.mode == Mode::E2e {
        let read = stop.consumed_total.load(Ordering::Acquire);
        let acked = produce.acked_records + produce.warmup_records;
        if read < acked {
            *consume
                .errors
                .entry("e2e: acked but not read back".into())
                .or_default() += acked - read;
        }
    }
    let drained_s = match spec.mode {
        Mode::Consume => drained_after(consume.last_record_at, win.measure_from, win.end),
        _ => None,
    };
    Ok(RunStats {
        produce,
        consume,
        partitions,
        measured_s: spec.duration_s,
        drained_s,
    })
}

#[cfg(test)]
mod tests {
    //! The coordinated-omission correction on a scripted timeline (no clock, no socket):
    //! what the recorder makes of known send and ack instants; when a consume run counts
    //! as having drained its topic.

    use super::*;

    #[test]
    fn a_topic_read_to_its_end_early_is_drained_after_its_last_record() {
        let from = Instant::now();
        let end = from + Duration::from_secs(10);
        let at = |ms: u64| Some(from + Duration::from_millis(ms));
        assert_eq!(drained_after(at(1_500), from, end), Some(1.5));
        assert_eq!(
            drained_after(at(9_000), from, end),
            Some(9.0),
            "idle 1 s at the end"
        );
        assert_eq!(drained_after(at(9_500), from, end), None, "still reading");
        assert_eq!(drained_after(None, from, end), None, "nothing read");
    }

    const STALL: Duration = Duration::from_millis(100);
    const FAST_ACK: Duration = Duration::from_micros(100);

    fn completion(intended: Vec<Instant>, sent_at: Instant, at: Instant) -> Completion {
        let carried = Carried {
            bytes: vec![100 * intended.len()],
            intended: vec![intended],
            sent_at,
        };
        let acked = Acked {
            at,
            failed: Vec::new(),
        };
        (Ok(acked), carried)
    }

    /// 1000 rec/s for 3 s; the broker stalls 100 ms at the start of every second. A
    /// pipelined sender with a window of 5 sends the stalled record and the next four as
    /// they come (all answered when the stall ends), then holds the records meanwhile in
    /// one batch sent when the stall ends. Corrected, ~10 % of records waited up to 100 ms
    /// (p99 shows the stall); uncorrected, only the 15 records on the wire did (p99 hides
    /// it), which is what a closed-loop tool reports.
    #[test]
    fn a_scripted_stall_shows_corrected_and_hides_uncorrected() {
        // The honesty tests' one-producer, one-partition run at 1000 rec/s for 3 s.
        let spec = crate::tests::spec(1000.0, 3.0, 0.0);
        let progress = Progress::default();
        let start = Instant::now();
        let win = Window {
            start,
            measure_from: start,
            end: start + Duration::from_secs(3),
            epoch: Epoch::now(),
            run_id: 1,
        };
        let mut p = Producer {
            spec: &spec,
            win,
            partitions: 1,
            rng: StdRng::seed_from_u64(1),
            sticky: 0,
            open: BTreeMap::new(),
            template: Bytes::from_static(&[0; 100]),
            stats: ProduceStats::default(),
            progress: &progress,
        };
        let period = Duration::from_millis(1);
        for second in 0..3u32 {
            let base = start + Duration::from_secs(second.into());
            let stall_end = base + STALL;
            let mut held = Vec::new();
            for i in 0..1000u32 {
                let t = base + period * i;
                if t >= stall_end {
                    p.record(completion(vec![t], t, t + FAST_ACK));
                } else if i < spec.max_in_flight as u32 {
                    p.record(completion(vec![t], t, stall_end + FAST_ACK * i));
                } else {
                    held.push(t);
                }
            }
            p.record(completion(held, stall_end, stall_end + FAST_ACK));
        }
        let s = &p.stats;
        assert_eq!(s.acked_records, 3000);
        assert_eq!(s.failed_records, 0);
        let corrected_p99 = s.corrected.quantile_us(0.99);
        let uncorrected_p99 = s.uncorrected.quantile_us(0.99);
        assert!(
            (80_000..=101_000).contains(&corrected_p99),
            "corrected p99 {corrected_p99} µs: 1 % of records waited about 90 ms"
        );
        assert!(
            uncorrected_p99 <= 1_000,
            "uncorrected p99 {uncorrected_p99} µs: only 15 of 3000 records were on the wire in a stall"
        );
        assert!(
            s.uncorrected.quantile_us(1.0) >= 100_000,
            "the stalled request itself shows in the uncorrected max"
        );
        // Send lag: the held records were written up to 95 ms after their instants.
        assert!(s.send_lag.quantile_us(1.0) >= 95_000);
        assert_eq!(progress.acked.load(Ordering::Relaxed), 3000);
        assert_eq!(s.seconds.len(), 3, "one series entry per second");
    }
}
