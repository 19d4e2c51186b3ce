//! The admin HTTP listener (shard 0): minimal HTTP/1.1 with `Connection: close`; GET for
//! everything, PUT for `/v1/log-level` with the admin bearer token (`admin::token`) or,
//! over HTTPS (`admin_tls`), a verified client certificate.
//!
//! Invariant: a request head larger than `ADMIN_REQUEST_BYTES_MAX`, a body larger than
//! `ADMIN_BODY_BYTES_MAX`, or a request slower than `ADMIN_READ_TIMEOUT` closes the
//! connection; nothing else is read.

use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use crate::admin::status;
use crate::admin::{self, Response};
use crate::cluster::ClusterHost;
use crate::runtime::task::spawn_local;
use crate::security::tls::{Loaded, Reloading};
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// Largest request head read.
pub const ADMIN_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// Time allowed to send the request head.
pub const ADMIN_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an HTTPS client may take over its TLS handshake.
pub const ADMIN_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long readiness waits for every shard to say it applied its first metadata (one
/// that has answers at once; one still opening its partitions makes the answer not
/// ready).
const READY_SHARDS_WAIT: Duration = Duration::from_millis(500);

/// Serves admin HTTP (HTTPS with `tls`, `admin_tls`) until the shard stops.
pub async fn serve(shard: Rc<Shard>, tls: Option<Loaded>) -> anyhow::Result<()> {
    let addr = shard.config.admin_addr;
    let listener = TcpListener::bind(addr)
        .map_err(std::io::Error::from)
        .with_context(|| format!("admin listener on {addr}"))?;
    let tls = tls.map(|t| Rc::new(Reloading::new(t)));
    while !shard.stopping() {
        match crate::runtime::task::timeout(Duration::from_millis(200), listener.accept()).await {
            Some(Ok(stream)) => match &tls {
                None => spawn_local(handle(shard.clone(), stream, false)),
                Some(tls) => spawn_local(handle_tls(shard.clone(), stream, tls.clone())),
            },
            Some(Err(e)) => tracing::warn!(error = %e, "admin accept failed"),
            None => {}
        }
    }
    Ok(())
}

/// An HTTPS connection: TLS first (certificate files read again if they changed), then
/// HTTP; a client certificate that verified against `ssl_ca_location` authorizes the
/// mutating endpoints as the bearer token does.
async fn handle_tls(shard: Rc<Shard>, stream: TcpStream, tls: Rc<Reloading>) {
    if let Err(e) = tls.reload_if_changed() {
        tracing::warn!(error = %e, "admin TLS files changed but do not load: serving the previous ones");
    }
    let acceptor = futures_rustls::TlsAcceptor::from(tls.config(false));
    let accepted =
        crate::runtime::task::timeout(ADMIN_TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
    let Some(Ok(stream)) = accepted else {
        tracing::debug!("admin TLS handshake failed or timed out");
        return;
    };
    let client_certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .is_some_and(|c| !c.is_empty());
    handle(shard, stream, client_certificate).await;
}

async fn handle<S>(shard: Rc<Shard>, mut stream: S, client_certificate: bool)
where
    S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin,
{
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let scanned = loop {
        let read = crate::runtime::task::timeout(ADMIN_READ_TIMEOUT, stream.read(&mut chunk)).await;
        let Some(Ok(n)) = read else { return };
        if n == 0 {
            return;
        }
        head.extend_from_slice(&chunk[..n]);
        match status::scan_head(&head, ADMIN_REQUEST_BYTES_MAX) {
            status::HeadScan::Incomplete => {}
            done => break done,
        }
    };
    let resp = match scanned {
        status::HeadScan::Complete { end, body_bytes } => {
            let text_head = String::from_utf8_lossy(&head[..end]).into_owned();
            let mut body = head.split_off(end);
            if !read_body(&mut stream, &mut body, body_bytes).await {
                return;
            }
            route(&shard, &text_head, &body, client_certificate).await
        }
        status::HeadScan::Refused(status, why) => text(status, why),
        status::HeadScan::Incomplete => return,
    };
    let _ = stream.write_all(&resp.encode()).await;
    let _ = stream.flush().await;
    let _ = stream.close().await;
}

/// A 200 answer of JSON `body`.
fn json(body: String) -> Response {
    Response {
        status: "200 OK",
        content_type: "application/json",
        body,
    }
}

fn text(status: &'static str, body: &str) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.to_string(),
    }
}

async fn snapshots(shard: &Rc<Shard>) -> Vec<admin::ShardSnapshot> {
    let calls = (0..shard.count).map(|s| shard.call(s, Op::Stats));
    futures::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(|r| match r {
            Reply::Stats(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// Reads until `body` holds `len` bytes (bounded by the caller); false on EOF or timeout.
async fn read_body<S>(stream: &mut S, body: &mut Vec<u8>, len: usize) -> bool
where
    S: futures::io::AsyncRead + Unpin,
{
    let mut chunk = [0u8; 1024];
    while body.len() < len {
        let read = crate::runtime::task::timeout(ADMIN_READ_TIMEOUT, stream.read(&mut chunk)).await;
        match read {
            Some(Ok(n)) if n > 0 => body.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
    body.truncate(len);
    true
}

/// Ready: not draining its leaderships before a stop nor stopping (a load balancer sends
/// new clients elsewhere from the moment the controlled shutdown begins, while this node
/// still answers the ones it has), (in a cluster) the cluster is ready, and every shard applied its
/// first metadata snapshot, which is when the shards start serving Kafka (start.rs): its
/// partitions are open then. A shard that does not say so within
/// `READY_SHARDS_WAIT` makes the answer not ready.
async fn ready(shard: &Rc<Shard>) -> bool {
    let clustered_ready = !shard.clustered() || shard.cluster_ready();
    if shard.metadata().version == 0 || shard.draining() || shard.stopping() || !clustered_ready {
        return false;
    }
    crate::runtime::task::timeout(READY_SHARDS_WAIT, shard.every_shard_has_metadata())
        .await
        .is_some()
}

async fn route(shard: &Rc<Shard>, head: &str, body: &[u8], client_certificate: bool) -> Response {
    let (path, query) = match status::request_line(head) {
        Some(("GET", path, query)) => (path, query),
        Some(("PUT", "/v1/log-level", _)) => {
            let token = crate::admin::token::authorized(head, &shard.config.admin_token.0);
            if !token && !client_certificate {
                tracing::warn!("admin: PUT /v1/log-level without the admin token refused");
                return text(
                    "401 Unauthorized",
                    &format!(
                        "PUT /v1/log-level needs the header `Authorization: Bearer <token>` \
                         with the token in the broker's admin_token_file ({}), or (admin_tls) \
                         a client certificate of ssl_ca_location's CA\n",
                        shard.config.admin_token_file.display()
                    ),
                );
            }
            return status::log_level(body);
        }
        _ => {
            return text(
                "405 Method Not Allowed",
                "only GET, and PUT /v1/log-level\n",
            )
        }
    };
    match path {
        "/v1/self-test/blob" => crate::admin::netcheck::blob(query),
        "/v1/self-test/network" => crate::admin::netcheck::network(query).await,
        "/v1/health/live" => text("200 OK", "live\n"),
        "/v1/health" | "/v1/health/ready" => {
            if ready(shard).await {
                text("200 OK", "ready\n")
            } else {
                text("503 Service Unavailable", "not ready\n")
            }
        }
        "/v1/log-level" => status::current_log_level(),
        "/v1/nodes" => json(status::render_nodes(&shard.metadata())),
        "/v1/status" => {
            // Readiness first: once ready, the snapshots show every shard's partitions.
            let ready = ready(shard).await;
            let snaps = snapshots(shard).await;
            let meta = shard.metadata();
            let space = strand_storage::io::filesystem_space(&shard.config.data_dir)
                .await
                .map_err(|e| e.to_string());
            let input = status::StatusInput {
                config: &shard.config,
                cluster_id: &meta.cluster_id,
                ready,
                space,
            };
            json(status::render_status(&input, &snaps))
        }
        "/metrics" => {
            let snaps = snapshots(shard).await;
            Response {
                status: "200 OK",
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body: admin::render_metrics(&snaps),
            }
        }
        _ => text("404 Not Found", "not found\n"),
    }
}
