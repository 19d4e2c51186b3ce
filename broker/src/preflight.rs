//! Start-up checks that fail loudly with the fix in the message (ARCHITECTURE.md, The
//! shard runtime): data directory usable with O_DIRECT, Kafka port free. io_uring and
//! locked memory are checked when the executors start (`shard::run`).

use anyhow::{bail, Context};

use crate::config::Config;

/// Runs the checks.
pub fn check(config: &Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data directory {}", config.data_dir.display()))?;
    if let Err(e) = strand_storage::io::probe_direct_io(&config.data_dir) {
        if !config.allow_buffered_io {
            bail!("{e}");
        }
        tracing::warn!(error = %e, "data directory without O_DIRECT: using buffered i/o as configured");
    }
    for (what, addr, flag) in [
        ("Kafka", config.kafka_addr, "--kafka-addr"),
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
    let deadline = crate::clock::now() + std::time::Duration::from_secs(3);
    let mut listening = true;
    while listening && crate::clock::now() < deadline {
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
