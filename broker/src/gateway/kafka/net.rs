//! Kafka connections on a shard: accept on every listener (SO_REUSEPORT, every shard
//! accepts), secure them as the listener's protocol says (TLS, then SASL), read
//! length-prefixed frames, run requests concurrently, write responses in request order.
//!
//! Invariant: a length prefix is checked against `REQUEST_BYTES_MAX` before anything is
//! allocated for it; a framing error closes this connection only; at most
//! `PIPELINE_DEPTH` requests of one connection are in flight (then reading stops).

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures::channel::oneshot;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use glommio::{GlommioError, ResourceType};
use kafka_protocol::messages::ApiKey;

use crate::common::config::{SecurityProtocol, REQUEST_BYTES_MAX};
use crate::common::metrics::ProduceStage;
use crate::gateway::kafka::{self, sasl, FramingError, Listener};
use crate::runtime::task::{repoll, spawn_local};
use crate::security::principal::PrincipalMapper;
use crate::security::tls::Reloading;
use crate::shard::budget::Held;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;
use crate::shard::PEER_CHECK;

/// Requests of one connection in flight before the reader waits (Kafka clients default
/// to 5 in-flight requests per connection; 64 leaves room for pipelining consumers).
pub const PIPELINE_DEPTH: usize = 64;
/// A connection with no request for this long is closed (Kafka's
/// `connections.max.idle.ms` default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A request whose length arrived must be complete within this (half-sent requests).
pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A request still unanswered after this is logged once as slow (and again when it is
/// answered), except the APIs that wait by design (`waits_by_design`).
pub const SLOW_REQUEST_WARN: Duration = Duration::from_secs(5);

/// Index of Produce in `kafka::SUPPORTED` (checked by a test).
const PRODUCE_API_INDEX: usize = 0;

/// The index in `kafka::SUPPORTED` of a frame's API key, if supported.
fn api_index(frame: &[u8]) -> Option<usize> {
    let key = i16::from_be_bytes(*frame.first_chunk::<2>()?);
    kafka::SUPPORTED
        .iter()
        .position(|(k, _, _)| *k as i16 == key)
}

/// The API and version of a request frame (an API this broker serves).
fn key_version(frame: &[u8]) -> Option<(ApiKey, i16)> {
    let key = kafka::SUPPORTED.get(api_index(frame)?)?.0;
    let version = i16::from_be_bytes(*frame.get(2..4)?.first_chunk::<2>()?);
    Some((key, version))
}

/// Accepts connections on every listener until `stop` fires; `tls`: the shard's TLS
/// configuration (when a listener is SSL or SASL_SSL; `watch_tls_files` keeps it current).
pub async fn serve(
    shard: Rc<Shard>,
    stop: oneshot::Receiver<()>,
    tls: Option<Rc<Reloading>>,
) -> anyhow::Result<()> {
    let mut sockets = Vec::with_capacity(shard.config.listeners.len());
    for l in &shard.config.listeners {
        let socket = TcpListener::bind(l.addr)
            .map_err(std::io::Error::from)
            .with_context(|| {
                format!(
                    "cannot listen on {} (listener {}); pick another address with \
                     --kafka-addr (or --listeners)",
                    l.addr, l.name
                )
            })?;
        sockets.push(socket);
    }
    let security = Rc::new(Security::new(&shard, tls)?);
    let mut stop = stop;
    let refusals = Rc::new(crate::common::logging::RateLimit::new(REFUSAL_LOG_INTERVAL));
    loop {
        let accepted = {
            let accepts = sockets
                .iter()
                .enumerate()
                .map(|(i, s)| Box::pin(async move { (s.accept().await, Listener(i)) }));
            let any = futures::future::select_all(accepts);
            match futures::future::select(any, &mut stop).await {
                futures::future::Either::Left(((a, _, _), _)) => a,
                futures::future::Either::Right(_) => return Ok(()),
            }
        };
        match accepted {
            (Ok(stream), listener) => {
                let _ = stream.set_nodelay(true);
                let admitted = admitted(
                    shard.clone(),
                    stream,
                    listener,
                    refusals.clone(),
                    security.clone(),
                );
                spawn_local(admitted);
            }
            (Err(e), _) => {
                tracing::warn!(shard = shard.id, error = %e, "accept failed");
                crate::runtime::task::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// How long a TLS client may take over its handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a shard looks whether its TLS files changed (`security::tls::Reloading`).
pub const TLS_RELOAD_CHECK: Duration = Duration::from_secs(1);
/// Failed TLS handshakes are logged at most once per this interval (per shard).
const TLS_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A shard's TLS configuration and principal mapping (for every listener).
struct Security {
    /// The TLS configuration, when a listener is SSL or SASL_SSL.
    tls: Option<Rc<Reloading>>,
    /// `ssl_principal_mapping_rules`.
    mapper: PrincipalMapper,
    /// Limit on failure warnings.
    failures: crate::common::logging::RateLimit,
}

impl Security {
    fn new(shard: &Shard, tls: Option<Rc<Reloading>>) -> anyhow::Result<Security> {
        let config = &shard.config;
        if tls.is_none() && config.listeners.iter().any(|l| l.protocol.tls()) {
            anyhow::bail!("a TLS listener without its TLS files loaded at start");
        }
        Ok(Security {
            tls,
            mapper: PrincipalMapper::parse(&config.ssl.principal_mapping_rules)?,
            failures: crate::common::logging::RateLimit::new(TLS_FAILURE_LOG_INTERVAL),
        })
    }

    /// Counts and logs (rate-limited) a TLS connection that ends before it is served.
    fn failed(&self, shard: &Shard, peer: std::net::SocketAddr, why: &str) {
        shard.metrics.tls_failure();
        if let Some(suppressed) = self.failures.allow(crate::common::clock::now()) {
            tracing::warn!(shard = shard.id, %peer, suppressed, "TLS connection refused: {why}");
        }
    }
}

/// Reads the TLS files again whenever they change, until the shard stops.
pub async fn watch_tls_files(shard: Rc<Shard>, tls: Rc<Reloading>) {
    while !shard.stopping() {
        crate::runtime::task::sleep(TLS_RELOAD_CHECK).await;
        match tls.reload_if_changed() {
            Ok(false) => {}
            Ok(true) if shard.id == 0 => {
                tracing::info!("TLS certificate files changed: new connections get them");
            }
            Ok(true) => {}
            Err(e) if shard.id == 0 => tracing::warn!(
                error = %e,
                "TLS certificate files changed but do not load: still serving the previous ones"
            ),
            Err(_) => {}
        }
    }
}

/// Refused connections are logged at most once per this interval (per shard).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Serves `stream` if shard 0 admits its peer (`max_connections`, `max_connections_per_ip`,
/// shard::admission), and uncounts it there when it ends. A refused connection is
/// closed at once, counted, and logged (rate-limited): the client sees a disconnect, as
/// from a Kafka broker over its per-IP limit.
async fn admitted(
    shard: Rc<Shard>,
    stream: TcpStream,
    listener: Listener,
    refusals: Rc<crate::common::logging::RateLimit>,
    security: Rc<Security>,
) {
    // A socket without a peer address has already disconnected.
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    let ip = peer.ip();
    match shard.call(0, Op::AdmitConnection(ip)).await {
        Reply::Admission(Ok(())) => {}
        Reply::Admission(Err(why)) => {
            shard.metrics.connection_refused();
            if let Some(suppressed) = refusals.allow(crate::common::clock::now()) {
                tracing::warn!(
                    shard = shard.id,
                    %peer,
                    suppressed,
                    "Kafka connection refused: {why}"
                );
            }
            return;
        }
        _ => return,
    }
    secured(&shard, stream, peer, listener, &security).await;
    let _ = shard.call(0, Op::ReleaseConnection(ip)).await;
}

/// Serves a connection as its listener's protocol says: TLS first for SSL and SASL_SSL
/// (the principal of SSL from the client certificate, if any), SASL in `connection`.
async fn secured(
    shard: &Rc<Shard>,
    stream: TcpStream,
    peer: std::net::SocketAddr,
    listener: Listener,
    security: &Security,
) {
    let Some(protocol) = shard.config.listeners.get(listener.0).map(|l| l.protocol) else {
        return;
    };
    let mut conn = kafka::Conn {
        id: next_connection_id(),
        host: format!("/{}", peer.ip()).into(),
        listener,
        principal: kafka::ANONYMOUS.into(),
        muted_until: Rc::default(),
        throttle_ms: 0,
        received: None,
    };
    let Some(tls) = security.tls.as_ref().filter(|_| protocol.tls()) else {
        return connection(shard.clone(), stream, peer, conn).await;
    };
    let acceptor = futures_rustls::TlsAcceptor::from(tls.config(protocol.sasl()));
    let stream =
        match crate::runtime::task::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Some(Ok(s)) => s,
            Some(Err(e)) => return security.failed(shard, peer, &e.to_string()),
            None => return security.failed(shard, peer, "the handshake timed out"),
        };
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(<[_]>::first);
    if let (SecurityProtocol::Ssl, Some(cert)) = (protocol, certificate) {
        let subject = match crate::security::principal::subject_of(cert) {
            Ok(s) => s,
            Err(e) => return security.failed(shard, peer, &e.to_string()),
        };
        match security.mapper.map(&subject) {
            Some(name) => conn.principal = format!("User:{name}").into(),
            None => {
                let why = format!("no ssl_principal_mapping_rules rule matches {subject}");
                return security.failed(shard, peer, &why);
            }
        }
    }
    tracing::debug!(%peer, principal = &*conn.principal, "TLS connection");
    connection(shard.clone(), stream, peer, conn).await;
}

/// A request's handling: its API (index in `kafka::SUPPORTED`, for latency metrics),
/// when its frame was read, its response, and the in-flight bytes the response holds
/// until it is written.
type Pending = glommio::Task<(
    Option<usize>,
    Instant,
    Result<Option<kafka::response::Response>, FramingError>,
    Held,
)>;

#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
async fn connection<S>(shard: Rc<Shard>, stream: S, peer: std::net::SocketAddr, conn: kafka::Conn)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let peer = Some(peer);
    let conn_id = conn.id;
    let protocol = shard
        .config
        .listeners
        .get(conn.listener.0)
        .map(|l| l.protocol);
    shard.count_connection(true);
    shard.metrics.connection_accepted();
    let (mut rd, mut wr) = stream.split();
    let (tx, rx) = local_channel::new_bounded::<Pending>(PIPELINE_DEPTH);
    let mut sasl = protocol
        .is_some_and(SecurityProtocol::sasl)
        .then(sasl::SaslConn::default);
    let mut conn = conn;
    let metrics = shard.metrics.clone();
    let late_log = crate::common::logging::RateLimit::new(LATE_RESPONSE_LOG_INTERVAL);
    let ws = shard.clone();
    // Every wait of the connection is polled again every PEER_CHECK (`repoll`): a lost wake
    // costs at most that, and is counted and logged (issue 28: a connection stalled for 30 s
    // with no request slow and no response late).
    let writer = glommio::spawn_local(async move {
        while let Some((Some(task), late)) = repoll(PEER_CHECK, rx.recv(), || false).await {
            ws.note_wake(late, "the next request of its connection", ws.id);
            let Some(((api, received, result, held), late)) =
                repoll(PEER_CHECK, task, || false).await
            else {
                break;
            };
            ws.note_wake(late, "a request's answer, awaited by its connection", ws.id);
            match result {
                Ok(Some(resp)) => {
                    let write_started = crate::common::clock::now();
                    // Flushed: a TLS stream holds what it has not yet written.
                    let written = async {
                        resp.write_to(&mut wr).await?;
                        wr.flush().await
                    };
                    match repoll(PEER_CHECK, written, || false).await {
                        Some((Ok(()), late)) => {
                            ws.note_wake(late, "a response's socket write", ws.id);
                        }
                        Some((Err(_), _)) | None => break,
                    }
                    let done = crate::common::clock::now();
                    if api == Some(PRODUCE_API_INDEX) {
                        metrics.produce_stage(ProduceStage::NetworkWrite, done - write_started);
                    }
                    warn_if_late(&late_log, peer, api, received, write_started, done);
                    if let Some(api) = api {
                        metrics.request(api, done - received);
                    }
                }
                Ok(None) => {
                    if let Some(api) = api {
                        metrics.request(api, crate::common::clock::now() - received);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "closing connection after a framing error");
                    break;
                }
            }
            drop(held);
        }
        let _ = wr.close().await;
    });
    loop {
        if shard.stopping() {
            break;
        }
        // A client over its quota: nothing more is read until its throttle time passed.
        if let Some(until) = conn.muted_until.take() {
            let now = crate::common::clock::now();
            if until > now {
                crate::runtime::task::sleep(until - now).await;
            }
        }
        let mut len = [0u8; 4];
        let idle_until = crate::common::clock::now() + IDLE_TIMEOUT;
        let idle = || crate::common::clock::now() >= idle_until;
        match repoll(PEER_CHECK, rd.read_exact(&mut len), idle).await {
            Some((Ok(()), late)) => shard.note_wake(late, "a request's length", shard.id),
            Some((Err(_), _)) => break,
            None => {
                tracing::debug!(?peer, "idle connection closed");
                break;
            }
        }
        let n = i32::from_be_bytes(len);
        let Some(n) = usize::try_from(n)
            .ok()
            .filter(|&n| n > 0 && n <= REQUEST_BYTES_MAX)
        else {
            tracing::debug!(
                ?peer,
                len = n,
                "request length outside limits: closing connection"
            );
            break;
        };
        let Some(held) = shard.reserve_request_bytes(n).await else {
            break;
        };
        let mut buf = vec![0u8; n];
        let read_until = crate::common::clock::now() + REQUEST_READ_TIMEOUT;
        let half_sent = || crate::common::clock::now() >= read_until;
        match repoll(PEER_CHECK, rd.read_exact(&mut buf), half_sent).await {
            Some((Ok(()), late)) => shard.note_wake(late, "a request's body", shard.id),
            Some((Err(_), _)) => break,
            None => {
                tracing::debug!(?peer, "half-sent request timed out: closing connection");
                break;
            }
        }
        let received = crate::common::clock::now();
        let frame = Bytes::from(buf);
        if let Some(gate) = sasl.as_mut().filter(|g| g.user().is_some()) {
            // KIP-368: a SaslHandshake re-authenticates; after the session, nothing else.
            if api_index(&frame).is_some_and(|i| kafka::SUPPORTED[i].0 == ApiKey::SaslHandshake) {
                gate.begin_reauthentication();
            } else if gate.expired(received) {
                tracing::debug!(?peer, "SASL session expired: closing the connection");
                break;
            }
        }
        if let Some(gate) = sasl.as_mut().filter(|g| g.user().is_none()) {
            // Not authenticated yet: the gate answers, in order, or the connection ends.
            let (answer, close) = match gate.serve(&shard, frame, &conn).await {
                sasl::Gate::Answer(b) => (Some(b), false),
                sasl::Gate::AnswerAndClose(b) => (Some(b), true),
                sasl::Gate::Close(why) => {
                    tracing::debug!(?peer, why, "closing a SASL connection");
                    (None, true)
                }
            };
            if let Some(b) = answer {
                let task =
                    glommio::spawn_local(async move { (None, received, Ok(Some(b.into())), held) });
                if tx.send(task).await.is_err() {
                    break;
                }
            }
            if close {
                break;
            }
            if let Some(user) = gate.user() {
                conn.principal = format!("User:{user}").into();
            }
            continue;
        }
        let api = api_index(&frame);
        shard.request_started();
        let s = shard.clone();
        let mut conn = conn.clone();
        conn.received = Some(received);
        if api == Some(PRODUCE_API_INDEX) {
            conn.throttle_ms = kafka::quotas::record_produce(&shard, &conn, &frame);
        }
        let request_quota = kafka::quotas::request_quota_client(&shard, &frame);
        let task = glommio::spawn_local(async move {
            if api == Some(PRODUCE_API_INDEX) {
                let waited = crate::common::clock::now() - received;
                s.metrics.produce_stage(ProduceStage::QueueWait, waited);
            }
            let r = match request_quota {
                None => handle_watched(&s, frame, &conn, peer, &held).await,
                Some(client_id) => {
                    let key_version = key_version(&frame);
                    let handled = handle_watched(&s, frame, &conn, peer, &held);
                    let (r, spent) = crate::runtime::task::timed_polls(handled).await;
                    let throttle_ms =
                        kafka::quotas::record_request_time(&s, &conn, &client_id, spent);
                    match (r, key_version) {
                        (Ok(Some(b)), Some((key, version))) if throttle_ms > 0 => {
                            Ok(Some(b.map_head(|head| {
                                kafka::throttle::with_throttle(head, key, version, throttle_ms)
                            })))
                        }
                        (r, _) => r,
                    }
                }
            };
            s.request_finished();
            if let Ok(Some(resp)) = &r {
                answer_holds(&held, resp.len());
            }
            (api, received, r, held)
        });
        // Room in the pipeline is normally there; waiting for it is counted, as it is how a
        // client outrunning its answers shows (its requests queue in the socket buffers).
        let task = match tx.try_send(task) {
            Ok(()) => continue,
            Err(GlommioError::WouldBlock(ResourceType::Channel(task))) => {
                shard.note_pipeline_full();
                task
            }
            Err(_) => break,
        };
        match repoll(PEER_CHECK, tx.send(task), || false).await {
            Some((Ok(()), late)) => {
                shard.note_wake(late, "room in its connection's pipeline", shard.id)
            }
            Some((Err(_), _)) | None => break,
        }
    }
    drop(tx);
    writer.await;
    // Kafka releases the records a member's share sessions hold when its connection ends.
    kafka::share_fetch::connection_closed(&shard, conn_id).await;
    shard.count_connection(false);
}

/// Makes `held` (the request's bytes, and a Fetch's records) the `answer_bytes` of its
/// answer, which it holds until written. An answer larger than its request takes the
/// difference if it is free; one that finds it used up (only answers other than Fetch's,
/// which take their records' bytes before reading them, and are small) is written
/// unaccounted beyond it rather than wait here, behind this connection's earlier answers.
fn answer_holds(held: &Held, answer_bytes: usize) {
    if answer_bytes <= held.bytes() {
        held.shrink_to(answer_bytes);
    } else {
        held.try_grow(answer_bytes - held.bytes());
    }
}

/// At most one "late response" warning per connection per this interval.
const LATE_RESPONSE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Warns (rate-limited) when a response reached the socket `SLOW_REQUEST_WARN` or more
/// after its frame was read, with how much of that was the socket write itself (a client
/// that does not read) and how much came before it (the handler, or earlier responses of
/// this connection still being answered: responses go out in request order). The handler
/// alone is watched by `handle_watched`; this catches a stall anywhere on the connection.
fn warn_if_late(
    log: &crate::common::logging::RateLimit,
    peer: Option<std::net::SocketAddr>,
    api: Option<usize>,
    received: Instant,
    write_started: Instant,
    done: Instant,
) {
    let total = done.saturating_duration_since(received);
    let key = api
        .and_then(|a| kafka::SUPPORTED.get(a))
        .map(|(k, _, _)| *k);
    if total < SLOW_REQUEST_WARN || key.is_some_and(|k| waits_by_design(k as i16)) {
        return;
    }
    if let Some(suppressed) = log.allow(done) {
        tracing::warn!(
            ?peer,
            api = key.map_or("unknown", kafka::api_name),
            total_ms = total.as_millis() as u64,
            write_ms = done.saturating_duration_since(write_started).as_millis() as u64,
            suppressed,
            "a Kafka response reached the socket late"
        );
    }
}

/// APIs whose answer may wait long by design: Fetch long polls, group membership waits
/// for a rebalance.
fn waits_by_design(key: i16) -> bool {
    use kafka_protocol::messages::ApiKey;
    [ApiKey::Fetch, ApiKey::JoinGroup, ApiKey::SyncGroup]
        .iter()
        .any(|k| *k as i16 == key)
}

/// Runs one request; one still unanswered after `SLOW_REQUEST_WARN` is logged with its API
/// and correlation id, and again with its time when answered.
async fn handle_watched(
    shard: &Rc<Shard>,
    frame: Bytes,
    conn: &kafka::Conn,
    peer: Option<std::net::SocketAddr>,
    held: &Held,
) -> Result<Option<kafka::response::Response>, FramingError> {
    let key = frame.first_chunk::<2>().map(|b| i16::from_be_bytes(*b));
    let correlation_id = frame
        .get(4..8)
        .and_then(|b| b.first_chunk::<4>())
        .map(|b| i32::from_be_bytes(*b));
    let started = crate::common::clock::now();
    let mut run = std::pin::pin!(kafka::handle(shard, frame, conn, held));
    let slow = std::pin::pin!(crate::runtime::task::sleep(SLOW_REQUEST_WARN));
    let run = match futures::future::select(run.as_mut(), slow).await {
        futures::future::Either::Left((r, _)) => return r,
        futures::future::Either::Right(((), run)) => run,
    };
    let watched = key.is_some_and(|k| !waits_by_design(k));
    let api = key
        .and_then(|k| kafka_protocol::messages::ApiKey::try_from(k).ok())
        .map_or("unknown", kafka::api_name);
    if watched {
        tracing::warn!(
            api,
            ?correlation_id,
            ?peer,
            after_ms = SLOW_REQUEST_WARN.as_millis() as u64,
            "Kafka request still unanswered"
        );
    }
    let r = run.await;
    if watched {
        let took_ms = crate::common::clock::now()
            .saturating_duration_since(started)
            .as_millis() as u64;
        tracing::warn!(
            api,
            ?correlation_id,
            ?peer,
            took_ms,
            "slow Kafka request answered"
        );
    }
    r
}

/// A new connection's id, unique on this shard (`Conn::id`).
fn next_connection_id() -> u64 {
    thread_local! {
        static NEXT: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
    }
    NEXT.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_waiting_apis_escape_the_slow_request_warning() {
        use kafka_protocol::messages::ApiKey;
        for k in [ApiKey::Fetch, ApiKey::JoinGroup, ApiKey::SyncGroup] {
            assert!(waits_by_design(k as i16), "{k:?}");
        }
        for k in [
            ApiKey::Produce,
            ApiKey::CreateTopics,
            ApiKey::Metadata,
            ApiKey::Heartbeat,
        ] {
            assert!(!waits_by_design(k as i16), "{k:?}");
        }
    }

    #[test]
    fn produce_is_at_its_index_and_frames_map_to_apis() {
        assert_eq!(
            kafka::SUPPORTED[PRODUCE_API_INDEX].0,
            kafka_protocol::messages::ApiKey::Produce
        );
        assert_eq!(api_index(&[0, 0, 0, 9]), Some(PRODUCE_API_INDEX));
        assert_eq!(api_index(&[0, 1, 0, 12]), Some(1)); // Fetch
        assert_eq!(api_index(&[0x7f, 0x7f]), None);
        assert_eq!(api_index(&[0]), None);
    }
}
