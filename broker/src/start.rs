//! Start-up: the composition root. Builds one pinned executor per CPU, gives each its
//! [`Shard`], and starts every subsystem on it (replication and the controller, the admin
//! listener, the Kafka and native listeners, retention and session sweeps); then waits for
//! a termination signal or a shard that stopped, and shuts every shard down.
//!
//! May use: every subsystem; nothing uses it but `main`. A home of glommio names (the
//! executors are built here).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::channel::{mpsc, oneshot};
use futures::future::Either;
use futures::StreamExt;
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use strand_storage::{IoBudget, LogConfig};

use crate::cluster::metastore::MetaStore;
use crate::common::config::Config;
use crate::partition::Partition;
use crate::runtime::cpus::affinity_cpus;
use crate::runtime::task::{sleep, spawn_local};
use crate::shard::ops::{Envelope, Op, Reply};
use crate::shard::{GatewayHooks, Shard, ShardWiring, PEER_CHECK, SHARD_QUEUE_DEPTH};

/// Every shard's queue and the flags shared between the shards, built before any starts.
struct Wiring {
    senders: Vec<mpsc::Sender<Envelope>>,
    alive: Arc<Vec<AtomicBool>>,
    native_ports: Arc<Vec<AtomicU16>>,
}

impl Wiring {
    /// The wiring of `count` shards, and each shard's receiving end of its queue.
    fn new(count: usize) -> (Wiring, Vec<mpsc::Receiver<Envelope>>) {
        let (senders, receivers) = crate::shard::queue::channels(count, SHARD_QUEUE_DEPTH);
        let wiring = Wiring {
            senders,
            alive: Arc::new((0..count).map(|_| AtomicBool::new(true)).collect()),
            native_ports: Arc::new((0..count).map(|_| AtomicU16::new(0)).collect()),
        };
        (wiring, receivers)
    }
}

/// Starts every shard and blocks until they exit (after SIGTERM/SIGINT).
pub fn run(mut config: Config) -> anyhow::Result<()> {
    let cpus = affinity_cpus()?;
    let count = shard_count(&config, &cpus)?;
    if crate::cluster::join::is_joiner(&config) {
        config.node_id = crate::cluster::join::node_id(&config, count)?;
    }
    crate::runtime::preflight::check(&config)?;
    if !config.seeds.is_empty() {
        config.incarnation = crate::cluster::incarnation::load_or_create(&config.data_dir)?;
    }
    config.admin_token = crate::common::config::Secret(crate::admin::token::load_or_create(
        &config.admin_token_file,
    )?);
    let config = Arc::new(config);
    let plan = strand_storage::io_runtime::plan_io_memory(count)?;
    crate::runtime::preflight::native_shard_ports_free(&config, count)?;
    let mask = crate::runtime::signals::block_termination_signals()?;
    let (wiring, receivers) = Wiring::new(count);
    // Woken by a termination signal (None) or by a shard that exited (Some(id)): a shard
    // that fails, even at start-up, takes the whole process down.
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<Option<usize>>();
    let tls = tls_at_start(&config)?;
    let mut handles = Vec::with_capacity(count);
    for (id, rx) in receivers.into_iter().enumerate() {
        let wired = ShardWiring {
            id,
            count,
            config: config.clone(),
            peers: wiring.senders.clone(),
            alive: wiring.alive.clone(),
            native_ports: wiring.native_ports.clone(),
        };
        handles.push(spawn_shard(
            cpus[id],
            plan.io_memory_bytes,
            (wired, tls.clone()),
            rx,
            exit_tx.clone(),
        )?);
    }
    tracing::info!(shards = count, addr = %config.kafka_addr, data_dir = %config.data_dir.display(), "strand starting");
    let signal_tx = exit_tx.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let signal = crate::runtime::signals::wait(&mask);
            tracing::info!(signal, "shutting down");
            let _ = signal_tx.send(None);
        })
        .context("starting the signal thread")?;
    if let Ok(Some(id)) = exit_rx.recv() {
        tracing::error!(
            shard = id,
            "a shard stopped on its own: shutting the others down"
        );
    }
    stop_and_join(&wiring.senders, handles)
}

/// The TLS files as read before the shards start: the Kafka listeners', the admin API's
/// and those between nodes.
#[derive(Clone, Default)]
struct TlsAtStart {
    /// For the SSL and SASL_SSL listeners and the native ones with `native_tls`.
    kafka: Option<crate::security::tls::Loaded>,
    /// For the admin API with `admin_tls` (client certificates asked for, not required).
    admin: Option<crate::security::tls::Loaded>,
    /// Between nodes (`rpc_tls_*`).
    rpc: Option<crate::security::tls::Loaded<crate::security::tls::RpcConfigs>>,
}

/// The TLS files of the SSL and SASL_SSL listeners, of the admin API and between nodes,
/// read once before any shard starts (an error names the file), and the principal mapping rules checked.
fn tls_at_start(config: &Config) -> anyhow::Result<TlsAtStart> {
    use crate::security::tls::Loaded;
    crate::security::principal::PrincipalMapper::parse(&config.ssl.principal_mapping_rules)?;
    let mut out = TlsAtStart::default();
    if config.native_tls || config.listeners.iter().any(|l| l.protocol.tls()) {
        out.kafka = Some(Loaded::load(&config.ssl).context("TLS listener")?);
    }
    if config.admin_tls {
        let admin = crate::common::config::SslConfig {
            client_auth: if config.ssl.ca_location.is_some() {
                crate::common::config::ClientAuth::Requested
            } else {
                crate::common::config::ClientAuth::None
            },
            ..config.ssl.clone()
        };
        out.admin = Some(Loaded::load(&admin).context("admin API TLS")?);
    }
    if let Some(o) = &config.oauthbearer {
        crate::security::jwt::JwksFile::load(&o.jwks_path, crate::common::clock::now())
            .context("sasl_oauthbearer_jwks_endpoint_url")?;
    }
    if let Some(rpc) = &config.rpc_tls {
        out.rpc = Some(Loaded::load(rpc).context("TLS between nodes (rpc_tls_*)")?);
        check_node_principal(config, rpc)?;
    }
    Ok(out)
}

/// With the authorizer on a cluster whose inter-broker listener is SSL, the nodes' own
/// requests come as their node certificate's principal: it must be a super user.
fn check_node_principal(
    config: &Config,
    rpc: &crate::common::config::SslConfig,
) -> anyhow::Result<()> {
    let inter = &config.listeners[config.inter_broker_listener];
    if config.seeds.is_empty()
        || !config.authorizer_enabled
        || inter.protocol != crate::common::listeners::SecurityProtocol::Ssl
    {
        return Ok(());
    }
    let subject = crate::security::tls::leaf_subject(rpc)?;
    let mapper =
        crate::security::principal::PrincipalMapper::parse(&config.ssl.principal_mapping_rules)?;
    let name = mapper.map(&subject).with_context(|| {
        format!("no ssl_principal_mapping_rules rule maps the node certificate's subject {subject}")
    })?;
    let principal = format!("User:{name}");
    if !config.super_users.contains(&principal) {
        bail!(
            "with authorizer_enabled, the nodes' own requests (transaction markers) come as \
             their certificate's principal {principal} over the SSL inter-broker listener: add \
             it to super_users"
        );
    }
    Ok(())
}

/// How many shards to run: one per CPU of the affinity mask, or `--smp` of them.
fn shard_count(config: &Config, cpus: &[usize]) -> anyhow::Result<usize> {
    if let Some(n) = config.smp.filter(|&n| n > cpus.len()) {
        bail!(
            "--smp {n} but only {} CPUs are in this process's affinity mask",
            cpus.len()
        );
    }
    Ok(config.smp.unwrap_or(cpus.len()).min(cpus.len()).max(1))
}

/// Starts shard `wired.id`'s executor pinned to `cpu`; it reports its exit on `exited`.
fn spawn_shard(
    cpu: usize,
    io_memory_bytes: usize,
    (wired, tls): (ShardWiring, TlsAtStart),
    rx: mpsc::Receiver<Envelope>,
    exited: std::sync::mpsc::Sender<Option<usize>>,
) -> anyhow::Result<ExecutorJoinHandle<anyhow::Result<()>>> {
    let id = wired.id;
    let stall_report_ms = wired.config.stall_report_ms;
    LocalExecutorBuilder::new(Placement::Fixed(cpu))
        .name(&format!("shard-{id}"))
        .io_memory(io_memory_bytes)
        .preempt_timer(crate::runtime::task::TASK_QUOTA)
        .detect_stalls(crate::runtime::stall::reporter(stall_report_ms))
        .spawn(move || async move {
            let flags = wired.alive.clone();
            let r = shard_main(wired, rx, tls).await;
            if let Some(a) = flags.get(id) {
                a.store(false, Ordering::Release);
            }
            let _ = exited.send(Some(id));
            r
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot start shard {id} (io_uring executor): {e}; check that io_uring is \
                 enabled (sysctl kernel.io_uring_disabled=0) and not blocked by seccomp"
            )
        })
}

/// Asks every shard to shut down and waits for each; an error if any failed.
fn stop_and_join(
    senders: &[mpsc::Sender<Envelope>],
    handles: Vec<ExecutorJoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    for tx in senders {
        let (reply, _rx) = oneshot::channel();
        let _ = tx.clone().try_send(Envelope {
            op: Op::Shutdown,
            reply,
        });
    }
    let mut failed = false;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %format!("{e:#}"), "shard failed");
                failed = true;
            }
            Err(e) => {
                tracing::error!(error = %e, "shard panicked");
                failed = true;
            }
        }
    }
    if failed {
        bail!("a shard failed; see the log above");
    }
    Ok(())
}

/// One shard's life: its state, its queue, its metadata, then its listeners until it stops.
async fn shard_main(
    wired: ShardWiring,
    rx: mpsc::Receiver<Envelope>,
    tls: TlsAtStart,
) -> anyhow::Result<()> {
    let config = wired.config.clone();
    let id = wired.id;
    strand_storage::io::prime_device_probe(&config.data_dir).await?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let shard = Rc::new(Shard::new(
        wired,
        GatewayHooks {
            api_names: api_names(),
            in_flight_bytes_max: config.in_flight_bytes_per_shard,
            group_request: crate::gateway::kafka::groups::on_coordinator,
        },
        stop_tx,
    ));
    let (done_tx, done_rx) = oneshot::channel::<()>();
    spawn_local(serve_queue(shard.clone(), rx, done_tx));
    // The admin API answers from here on, before metadata arrives: a node that cannot get
    // it (no controller quorum, or a fenced controller group) still shows why in /metrics,
    // /v1/status and the log level, and /v1/health/ready says it is not ready. It binds at
    // the first wait below, before any shard can have metadata and serve Kafka, so a
    // client that was served can always reach it.
    if id == 0 {
        let admin = shard.clone();
        let admin_tls = tls.admin.clone();
        spawn_local(async move {
            if let Err(e) = crate::admin::net::serve(admin, admin_tls).await {
                tracing::error!(error = %format!("{e:#}"), "admin HTTP stopped");
            }
        });
    }
    if shard.clustered() {
        start_cluster(&shard, tls.rpc.clone()).await?;
    } else if id == 0 {
        start_single_node_metadata(&shard).await?;
    }
    // Serve Kafka only once every shard has applied the first metadata snapshot, so no
    // request sees an empty cluster (and auto-creates a topic that exists), or a partition
    // still opening on its shard (answered as unknown).
    shard.every_shard_has_metadata().await;
    spawn_local(retention_loop(shard.clone()));
    crate::runtime::task::spawn_background("log-cleaner", cleaner_loop(shard.clone()));
    spawn_local(session_sweeper(shard.clone()));
    spawn_local(offsets_expiry(shard.clone()));
    spawn_local(txn_sweeper(shard.clone()));
    if config.authorizer_enabled && id == 0 {
        // The native protocol has no authentication yet: with ACLs on it would be a way
        // around them.
        tracing::warn!(
            "the native protocol listener is off while authorizer_enabled: it has no \
             authentication yet (Kafka clients are served as usual)"
        );
    }
    let listener_tls = tls
        .kafka
        .map(|t| Rc::new(crate::security::tls::Reloading::new(t)));
    if let Some(t) = &listener_tls {
        spawn_local(crate::gateway::kafka::net::watch_tls_files(
            shard.clone(),
            t.clone(),
        ));
    }
    if !config.authorizer_enabled {
        crate::gateway::native::net::listen(&shard, listener_tls.clone())?;
    }
    crate::gateway::kafka::net::serve(shard.clone(), stop_rx, listener_tls).await?;
    let _ = done_rx.await;
    tracing::info!(
        shard = id,
        cross_shard_messages = shard.stats().cross_shard_messages,
        "shard stopped"
    );
    Ok(())
}

/// Runs the shard's queue: each message as its own task, until `Op::Shutdown`, which is
/// executed last (then `done` fires and the receiver is dropped).
async fn serve_queue(
    shard: Rc<Shard>,
    mut rx: mpsc::Receiver<Envelope>,
    done: oneshot::Sender<()>,
) {
    let mut done = Some(done);
    // Polled again every PEER_CHECK: a sender's wake lost between threads would otherwise
    // leave the queue unread until the next message's wake.
    while let Some((Some(env), late)) =
        crate::runtime::task::repoll(PEER_CHECK, rx.next(), || false).await
    {
        shard.note_wake(late, "a message in this shard's queue", shard.id);
        let is_shutdown = matches!(env.op, Op::Shutdown);
        let shard = shard.clone();
        if is_shutdown {
            // Controlled shutdown first, with the queue still served: leader changes reach
            // every shard of this node, so its Metadata names the new leaders meanwhile.
            let mut drain = Box::pin(shard.drain_leadership());
            loop {
                match futures::future::select(drain, rx.next()).await {
                    Either::Left(((), _)) => break,
                    Either::Right((Some(next), d)) => {
                        drain = d;
                        let shard = shard.clone();
                        spawn_local(async move {
                            let r = shard.execute(next.op).await;
                            let _ = next.reply.send(r);
                        });
                    }
                    Either::Right((None, d)) => {
                        d.await;
                        break;
                    }
                }
            }
            shard.execute(env.op).await;
            let _ = env.reply.send(Reply::Done);
            if let Some(tx) = done.take() {
                let _ = tx.send(());
            }
            // Dropping the receiver answers every queued or later call at once.
            break;
        }
        spawn_local(async move {
            let r = shard.execute(env.op).await;
            let _ = env.reply.send(r);
        });
    }
}

/// Cluster mode: replication and the controller; on shard 0 also the one-time upgrade of a
/// single-node data directory, registration and `__consumer_offsets`.
async fn start_cluster(
    shard: &Rc<Shard>,
    tls: Option<crate::security::tls::Loaded<crate::security::tls::RpcConfigs>>,
) -> anyhow::Result<()> {
    crate::cluster::start(shard, tls)
        .await
        .context("starting replication")?;
    if shard.id != 0 {
        return Ok(());
    }
    let s = shard.clone();
    spawn_local(async move {
        // An upgraded single-node data directory: its topics first (before
        // registration names the cluster and __consumer_offsets is created).
        while let Err(e) = crate::cluster::adopt::adopt_single_node_data(&s).await {
            tracing::error!(error = %format!("{e:#}"), "upgrade of a single-node data directory failed; retrying");
            if s.stopping() {
                return;
            }
            sleep(Duration::from_secs(1)).await;
        }
        crate::cluster::register(&s).await;
        ensure_offsets_topic(&s).await;
    });
    Ok(())
}

/// A single node, shard 0: the metadata log, published to every shard.
async fn start_single_node_metadata(shard: &Rc<Shard>) -> anyhow::Result<()> {
    let config = &shard.config;
    let lc = LogConfig {
        allow_buffered_io: config.allow_buffered_io,
        shared_device_flush: config.shared_device_flush,
        ..LogConfig::default()
    };
    let mut store = MetaStore::open(&config.data_dir, lc)
        .await
        .context("opening the metadata log")?;
    // `__consumer_offsets` is in the first snapshot every shard applies: a client served
    // from the start finds it on any shard (it was created after the first publish, so a
    // shard could serve a moment without it).
    if let Some(cmd) = offsets_topic_command(shard, store.state()) {
        match store.commit(vec![cmd]).await {
            Ok(mut r) => log_offsets_topic_outcome(r.pop()),
            Err(e) => {
                return Err(e).context("writing __consumer_offsets to the metadata log");
            }
        }
    }
    let snapshot = Arc::new(store.state().clone());
    shard
        .producer_id_floor
        .set(snapshot.producer_ids_reserved_to);
    shard.put_metastore(store);
    shard.publish(snapshot).await;
    Ok(())
}

/// Metric label of each API in `kafka::SUPPORTED`, in order.
fn api_names() -> Vec<&'static str> {
    crate::gateway::kafka::SUPPORTED
        .iter()
        .map(|(k, _, _)| crate::gateway::kafka::api_name(*k))
        .collect()
}

/// `segment.bytes` of `__consumer_offsets` (Kafka's `offsets.topic.segment.bytes`): its
/// segments roll, so the cleaner can compact them.
const OFFSETS_TOPIC_SEGMENT_BYTES: u64 = 100 * 1024 * 1024;

/// The configs of `__consumer_offsets`: compacted, as Kafka's (a group's offsets and
/// metadata are keyed records; a tombstone deletes them).
fn offsets_topic_configs() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        (
            "segment.bytes".to_string(),
            OFFSETS_TOPIC_SEGMENT_BYTES.to_string(),
        ),
    ])
}

/// The command that creates `__consumer_offsets` at first start, or makes one created by
/// an older version (time retention, no compaction) compacted; none when it is in place.
fn offsets_topic_command(
    shard: &Shard,
    meta: &crate::cluster::metadata::Metadata,
) -> Option<crate::cluster::metadata::Command> {
    use crate::cluster::metadata::Command;
    use crate::group::OFFSETS_TOPIC;
    match meta.topics.get(OFFSETS_TOPIC).map(|t| &t.configs) {
        Some(c) if c.contains_key("cleanup.policy") => None,
        Some(_) => Some(Command::AlterConfig {
            name: OFFSETS_TOPIC.to_string(),
            set: offsets_topic_configs(),
            delete: Vec::new(),
        }),
        None => {
            let n = shard.config.offsets_topic_num_partitions;
            let configs = offsets_topic_configs();
            Some(crate::gateway::kafka::topics::create_command(
                shard,
                OFFSETS_TOPIC,
                n,
                configs,
                -1,
            ))
        }
    }
}

/// Logs a failed creation or reconfiguration of `__consumer_offsets`.
fn log_offsets_topic_outcome(r: Option<Result<(), crate::cluster::metadata::MetaError>>) {
    match r {
        // Another node created it, or this node's metadata was not applied yet at start.
        Some(Err(crate::cluster::metadata::MetaError::TopicExists(_))) | Some(Ok(())) | None => {}
        Some(Err(e)) => tracing::error!(
            error = %e,
            "cannot create or configure {}",
            crate::group::OFFSETS_TOPIC
        ),
    }
}

/// Cluster mode: creates or reconfigures `__consumer_offsets` through the controller log.
async fn ensure_offsets_topic(shard: &Rc<Shard>) {
    let Some(cmd) = offsets_topic_command(shard, &shard.metadata()) else {
        return;
    };
    let r = crate::gateway::kafka::topics::commit(shard, vec![cmd]).await;
    log_offsets_topic_outcome(r.into_iter().next_back());
}

/// Expires group member sessions.
async fn session_sweeper(shard: Rc<Shard>) {
    while !shard.stopping() {
        sleep(crate::group::coordinator::SESSION_SWEEP).await;
        crate::group::coordinator::expire_sessions(&shard);
        crate::group::heartbeat::expire_consumer_members(&shard);
        shard.expire_share_members();
    }
}

/// Completes the Prepare* transactions of ids this shard loaded (a previous coordinator's
/// unfinished ones), aborts transactions that outlived their timeout every
/// `transaction_abort_check_interval_ms`, and forgets idle transactional ids every
/// `transaction_expiry_check_interval_ms`.
async fn txn_sweeper(shard: Rc<Shard>) {
    let every = Duration::from_millis(shard.config.transaction_abort_check_interval_ms);
    let mut next_abort_check = crate::common::clock::now() + every;
    let expiry_every = Duration::from_millis(shard.config.transaction_expiry_check_interval_ms);
    let mut next_expiry_check = crate::common::clock::now() + expiry_every;
    while !shard.stopping() {
        sleep(crate::shard::txns::TXN_RESUME_CHECK).await;
        if shard.txns_resume.replace(false) {
            crate::txn::coordinator::resume_completions(&shard);
        }
        if crate::common::clock::now() >= next_abort_check {
            next_abort_check = crate::common::clock::now() + every;
            crate::txn::coordinator::abort_timed_out(&shard);
        }
        if crate::common::clock::now() >= next_expiry_check {
            next_expiry_check = crate::common::clock::now() + expiry_every;
            let expiration_ms = shard.config.transactional_id_expiration_ms;
            crate::txn::coordinator::expire_idle(&shard, expiration_ms);
        }
    }
}

/// Expires the committed offsets of the groups this shard coordinates, every
/// `offsets_retention_check_interval_ms` (KIP-211).
async fn offsets_expiry(shard: Rc<Shard>) {
    let every = Duration::from_millis(shard.config.offsets_retention_check_interval_ms);
    let retention_ms = i64::try_from(shard.config.offsets_retention_ms).unwrap_or(i64::MAX);
    while !shard.stopping() {
        sleep(every).await;
        let now_ms = crate::common::clock::wall_ms();
        crate::group::coordinator::expire_offsets(&shard, now_ms, retention_ms).await;
    }
}

/// Applies retention to this shard's partitions every `retention_check_interval_ms`.
async fn retention_loop(shard: Rc<Shard>) {
    let every = Duration::from_millis(shard.config.retention_check_interval_ms);
    while !shard.stopping() {
        sleep(every).await;
        let parts: Vec<Rc<Partition>> = shard.partitions.borrow().values().cloned().collect();
        for p in parts {
            match p.apply_retention().await {
                Ok(r) if r.segments_deleted > 0 => {
                    tracing::info!(topic = %p.topic, partition = p.index, segments = r.segments_deleted,
                        bytes = r.bytes_deleted, "retention deleted segments");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                }
            }
        }
    }
}

/// Memory of a shard's log-cleaner key map (Kafka's `log.cleaner.dedupe.buffer.size`,
/// per shard): about 700,000 distinct keys per pass. Allocated at the shard's first pass.
const CLEANER_MAP_BYTES: usize = 16 * 1024 * 1024;

/// Compacts this shard's compacted partitions (`cleanup.policy` with `compact`): every
/// `log_cleaner_backoff_ms` it rolls their idle active segments (`segment.ms`) and runs
/// one pass on each partition that is due, the most urgent first. Each round it also
/// closes the dropped segment files of every partition that readers held until then. Runs
/// in the shard's background task queue, its I/O within
/// `log_cleaner_io_max_bytes_per_second` (and `log_cleaner_io_busy_max_bytes_per_second`
/// while producers write) and after producers' flushes (`IoBudget`); its byte counters move
/// as it reads and writes.
async fn cleaner_loop(shard: Rc<Shard>) {
    let every = Duration::from_millis(shard.config.log_cleaner_backoff_ms);
    let mut map: Option<crate::partition::cleaner::OffsetMap> = None;
    let metrics = shard.metrics.clone();
    let mut budget = IoBudget::new(shard.config.log_cleaner_io_max_bytes_per_second)
        .with_busy_cap(Some(shard.config.log_cleaner_io_busy_max_bytes_per_second))
        .with_progress(Box::new(move |read, written| {
            metrics.cleaner_io(read, written)
        }));
    while !shard.stopping() {
        sleep(every).await;
        let now_ms = crate::common::clock::wall_ms();
        let parts: Vec<Rc<Partition>> = shard.partitions.borrow().values().cloned().collect();
        // Files of dropped segments whose last reader has finished since they were dropped.
        for p in &parts {
            p.log().reap_retired().await;
        }
        let mut due: Vec<_> = parts
            .into_iter()
            .filter(|p| p.cleanup().compact)
            .filter_map(|p| {
                p.roll_if_idle();
                p.compaction_due(now_ms).map(|d| (d, p))
            })
            .collect();
        due.sort_by(|(a, _), (b, _)| {
            b.must
                .cmp(&a.must)
                .then(b.dirty_ratio.total_cmp(&a.dirty_ratio))
        });
        for (_, p) in due {
            if shard.stopping() {
                break;
            }
            let map = map.get_or_insert_with(|| {
                crate::partition::cleaner::OffsetMap::with_memory(CLEANER_MAP_BYTES)
            });
            clean_partition(&p, map, &mut budget).await;
        }
    }
}

/// One compaction pass over `p`, logged and counted.
async fn clean_partition(
    p: &Partition,
    map: &mut crate::partition::cleaner::OffsetMap,
    budget: &mut IoBudget,
) {
    let waited = budget.throttled() + budget.deferred();
    let started = crate::common::clock::now();
    let r = p
        .compact_now(map, budget, crate::common::clock::wall_ms())
        .await;
    // Counted as soon as the pass's result is what Fetch serves, before the reaping below
    // (a reader of the metrics must not see the records gone and the count not yet moved).
    if let Ok(out) = &r {
        p.metrics().cleaner_pass(
            out.bytes_before.saturating_sub(out.bytes_after),
            (out.records_removed, out.markers_removed),
            out.unreadable_batches,
        );
    }
    // The pass held the replaced files until now: close them off the shard.
    p.log().reap_retired().await;
    p.metrics().cleaner_work(
        started.elapsed(),
        budget.throttled() + budget.deferred() - waited,
    );
    match r {
        Ok(out) => {
            if out.segments > 0 {
                tracing::info!(topic = %p.topic, partition = p.index, segments = out.segments,
                    bytes_before = out.bytes_before, bytes_after = out.bytes_after,
                    records_removed = out.records_removed, markers_removed = out.markers_removed,
                    cleaned_to = out.map_end.0,
                    "log compacted");
            }
        }
        Err(e) => {
            p.metrics().cleaner_error();
            tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "log compaction failed");
        }
    }
}
