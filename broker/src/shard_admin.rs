//! The admin HTTP listener (shard 0): minimal HTTP/1.1 GET with `Connection: close`.
//!
//! Invariant: a request head larger than `ADMIN_REQUEST_BYTES_MAX` or slower than
//! `ADMIN_READ_TIMEOUT` closes the connection; nothing else is read.

use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use crate::admin::{self, Response};
use crate::ops::{Op, Reply};
use crate::shard::{spawn_local, Shard};

/// Largest request head read.
pub const ADMIN_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// Time allowed to send the request head.
pub const ADMIN_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves admin HTTP until the shard stops.
pub async fn serve(shard: Rc<Shard>) -> anyhow::Result<()> {
    let addr = shard.config.admin_addr;
    let listener = TcpListener::bind(addr)
        .map_err(std::io::Error::from)
        .with_context(|| format!("admin listener on {addr}"))?;
    while !shard.stopping() {
        match crate::shard::timeout(Duration::from_millis(200), listener.accept()).await {
            Some(Ok(stream)) => spawn_local(handle(shard.clone(), stream)),
            Some(Err(e)) => tracing::warn!(error = %e, "admin accept failed"),
            None => {}
        }
    }
    Ok(())
}

async fn handle(shard: Rc<Shard>, mut stream: TcpStream) {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let complete = loop {
        let read = crate::shard::timeout(ADMIN_READ_TIMEOUT, stream.read(&mut chunk)).await;
        let Some(Ok(n)) = read else { return };
        if n == 0 {
            return;
        }
        head.extend_from_slice(&chunk[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        if head.len() > ADMIN_REQUEST_BYTES_MAX {
            break false;
        }
    };
    let resp = if complete {
        route(&shard, &String::from_utf8_lossy(&head)).await
    } else {
        text("431 Request Header Fields Too Large", "too large\n")
    };
    let _ = stream.write_all(&resp.encode()).await;
    let _ = stream.close().await;
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

async fn route(shard: &Rc<Shard>, head: &str) -> Response {
    match admin::request_path(head) {
        Some("/v1/health") | Some("/v1/health/live") => text("200 OK", "ok\n"),
        Some("/v1/health/ready") => {
            if shard.metadata().version > 0 && !shard.stopping() {
                text("200 OK", "ready\n")
            } else {
                text("503 Service Unavailable", "not ready\n")
            }
        }
        Some("/v1/status") => {
            let snaps = snapshots(shard).await;
            let body =
                admin::render_status(shard.config.node_id, &shard.metadata().cluster_id, &snaps);
            Response {
                status: "200 OK",
                content_type: "application/json",
                body,
            }
        }
        Some("/metrics") => {
            let snaps = snapshots(shard).await;
            Response {
                status: "200 OK",
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body: admin::render_metrics(&snaps),
            }
        }
        Some(_) => text("404 Not Found", "not found\n"),
        None => text("405 Method Not Allowed", "only GET\n"),
    }
}
