//! The real `strand` binary as a child process, and a tiny synchronous Kafka client to talk
//! to it (STYLE.md 9: loopback, ephemeral ports, temp data dirs, waits with deadlines).
//!
//! [`Broker`] runs `strand` (`STRAND_BIN`, else `<workspace>/target/debug/strand`) on a free
//! loopback port with a fresh data dir, can SIGKILL it and restart it on the same dir and
//! port, and on drop sends SIGTERM and checks that it exits 0. Its output goes to a log file per
//! start, whose tail is printed when a test fails.
//!
//! [`Client`] encodes requests and decodes responses with the `kafka-protocol` crate over a
//! blocking `TcpStream`, one request at a time, and can also write raw bytes (hostile-input
//! tests).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::ListOffsetsPartitionResponse;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, FindCoordinatorRequest,
    ListOffsetsRequest, ProduceRequest, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::clock::Deadline;

/// How long a starting broker may take to answer ApiVersions.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a SIGTERMed broker may take to exit.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// A client's socket read and write timeout.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between checks of a condition waited for with a deadline.
const POLL: Duration = Duration::from_millis(5);
/// Largest response frame a client accepts.
const RESPONSE_BYTES_MAX: usize = 64 << 20;
/// Launch attempts on fresh ports when a port is taken between choosing and binding it.
const PORT_ATTEMPTS: usize = 3;
/// Lines of the broker log printed when a test fails.
const LOG_TAIL_LINES: usize = 60;
/// Partition errors Kafka clients retry (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
/// NOT_LEADER_OR_FOLLOWER): a partition not served yet, e.g. right after a restart.
pub const RETRIABLE_PARTITION_ERRORS: [i16; 3] = [3, 5, 6];
/// The client id of [`Client`] requests.
pub const CLIENT_ID: &str = "strand-tests";

/// Broker flags a test chooses.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--smp`.
    pub smp: usize,
    /// `--offsets-topic-num-partitions`.
    pub offsets_topic_num_partitions: usize,
    /// `--group-initial-rebalance-delay-ms`.
    pub group_initial_rebalance_delay_ms: u64,
    /// `--num-partitions`.
    pub num_partitions: i32,
    /// Further flags, e.g. `["--fetch-max-bytes", "4096"]`.
    pub extra_args: Vec<String>,
    /// A SASL_PLAINTEXT listener beside the PLAINTEXT one (`Broker::sasl_addr`).
    pub sasl_listener: bool,
}

impl Options {
    /// Flushes paced at 100 ms and produces answered 30 ms or more after their read logged
    /// with their timeline (`--produce-slow-log-ms`): concurrent acks=all producers on one
    /// partition then wait for the next flush, and the log shows such a request.
    pub fn slow_produces_logged() -> Options {
        Options {
            extra_args: vec![
                "--group-commit-min-interval-us".into(),
                "100000".into(),
                "--produce-slow-log-ms".into(),
                "30".into(),
            ],
            ..Options::default()
        }
    }
}

impl Default for Options {
    /// One shard, 4 offsets partitions, no initial rebalance delay, 1 partition per topic.
    fn default() -> Options {
        Options {
            smp: 1,
            offsets_topic_num_partitions: 4,
            group_initial_rebalance_delay_ms: 0,
            num_partitions: 1,
            extra_args: Vec::new(),
            sasl_listener: false,
        }
    }
}

/// A running (or killed) `strand` process with its own data dir. If the test fails, the
/// broker is killed and its log tail printed; `STRAND_KEEP_DIRS=1` keeps its directory.
#[derive(Debug)]
pub struct Broker {
    bin: PathBuf,
    // Holds the data dir and the logs; `None` once kept (STRAND_KEEP_DIRS=1).
    root: Option<tempfile::TempDir>,
    addr: SocketAddr,
    /// Native handshake listener (kept across restarts, like the Kafka port).
    native_addr: SocketAddr,
    /// Admin HTTP listener of the current start (a free port per start).
    admin_addr: Option<SocketAddr>,
    /// The SASL_PLAINTEXT listener (`Options::sasl_listener`).
    sasl_addr: Option<SocketAddr>,
    options: Options,
    child: Option<Child>,
    starts: usize,
}

impl Broker {
    /// Starts a broker in a new directory under `tmp_root` (a real filesystem: pass
    /// `env!("CARGO_TARGET_TMPDIR")`) and waits until it answers ApiVersions.
    pub fn start(tmp_root: &Path, options: Options) -> Broker {
        let bin = binary();
        let root = tempfile::Builder::new()
            .prefix("strand-broker-")
            .tempdir_in(tmp_root)
            .unwrap_or_else(|e| panic!("temp dir under {}: {e}", tmp_root.display()));
        let mut broker = Broker {
            bin,
            root: Some(root),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            native_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin_addr: None,
            sasl_addr: None,
            options,
            child: None,
            starts: 0,
        };
        broker.launch_on_free_port();
        broker
    }

    /// The SASL_PLAINTEXT listener's address (`Options::sasl_listener`).
    pub fn sasl_addr(&self) -> SocketAddr {
        self.sasl_addr.expect("started with Options::sasl_listener")
    }

    /// The running process's peak resident set size (`VmHWM` of /proc/<pid>/status).
    pub fn peak_rss_bytes(&self) -> u64 {
        let child = self.child.as_ref().expect("broker is running");
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .expect("read /proc/<pid>/status");
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM in /proc/<pid>/status");
        kib * 1024
    }

    /// The Kafka listener.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The native protocol's handshake address.
    pub fn native_addr(&self) -> SocketAddr {
        self.native_addr
    }

    /// The admin HTTP address of the current start, if the binary has that listener.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// `GET path` on the admin listener: the response body.
    pub fn admin_get(&self, path: &str) -> String {
        let addr = self.admin_addr.expect("broker has an admin listener");
        self.try_admin_get(path)
            .unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
    }

    /// `GET path` on the admin listener: the response body, or why there is none (a
    /// broker not listening yet).
    pub fn try_admin_get(&self, path: &str) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let addr = self.admin_addr.expect("broker has an admin listener");
        let mut s = TcpStream::connect(addr)?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: strand\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out
            .split_once("\r\n\r\n")
            .map_or(out.clone(), |(_, b)| b.to_string()))
    }

    /// The sum over shards of a Prometheus counter or gauge (`name` as exposed).
    pub fn metric_sum(&self, name: &str) -> f64 {
        self.admin_get("/metrics")
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The data directory (kept across restarts).
    pub fn data_dir(&self) -> PathBuf {
        self.root_dir().join("data")
    }

    /// A new connection to the broker.
    pub fn connect(&self) -> Client {
        Client::connect(self.addr).unwrap_or_else(|e| panic!("connect to {}: {e}", self.addr))
    }

    /// Panics (with the log tail) unless the process is still running.
    pub fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("broker was started");
        if let Some(status) = child.try_wait().expect("poll broker") {
            panic!(
                "strand exited unexpectedly ({status}); log:\n{}",
                self.log_tail()
            );
        }
    }

    /// Kills the broker with SIGKILL (a crash) and reaps it.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("broker is running");
        child.kill().expect("SIGKILL strand");
        let status = child.wait().expect("reap strand");
        assert_eq!(status.signal(), Some(SIGKILL), "strand: {status}");
    }

    /// Sends SIGTERM and waits for the exit; panics unless it exits 0 in time.
    pub fn stop(&mut self) {
        let status = self.terminate();
        assert!(
            status.success(),
            "strand exited with {status} after SIGTERM (expected 0); log:\n{}",
            self.log_tail()
        );
    }

    /// Starts the broker again on the same data dir and port, after [`Broker::kill9`] or
    /// [`Broker::stop`], as an operator restarts a broker that clients know by address
    /// (connections of the previous process may linger in TIME_WAIT; `broker_restart.rs`).
    /// Waits first until nothing accepts on the port: a killed strand's listening sockets
    /// outlive the reaped process by a few milliseconds (io_uring releases its files
    /// asynchronously), and the start-up check refuses a port something listens on.
    pub fn restart(&mut self) {
        self.restart_observing(&mut |_| {});
    }

    /// [`Self::restart`], calling `observe` on the starting broker between its polls of
    /// the Kafka listener (its admin listener answers from early in the start).
    pub fn restart_observing(&mut self, observe: &mut dyn FnMut(&Broker)) {
        assert!(self.child.is_none(), "restart of a running broker");
        let deadline = Deadline::after(STOP_TIMEOUT);
        while TcpStream::connect_timeout(&self.addr, POLL).is_ok() {
            assert!(
                deadline.remaining().is_some(),
                "{} still accepts connections {STOP_TIMEOUT:?} after strand exited",
                self.addr
            );
            std::thread::sleep(POLL);
        }
        if let Err(e) = self.launch(observe) {
            panic!("restart on the same port {} failed: {e}", self.addr);
        }
    }

    fn root_dir(&self) -> &Path {
        self.root.as_ref().expect("broker dir").path()
    }

    fn log_path(&self, start: usize) -> PathBuf {
        self.root_dir().join(format!("strand-{start}.log"))
    }

    /// Launches on a port free a moment ago; another process may take it first, so an
    /// "address in use" exit is retried on another port.
    fn launch_on_free_port(&mut self) {
        for attempt in 1..=PORT_ATTEMPTS {
            self.addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            self.native_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            if self.options.sasl_listener {
                self.sasl_addr = Some(SocketAddr::from(([127, 0, 0, 1], free_port())));
            }
            match self.launch(&mut |_| {}) {
                Ok(()) => return,
                Err(e) if e.contains("Address already in use") && attempt < PORT_ATTEMPTS => {
                    eprintln!("port {} taken meanwhile, trying another: {e}", self.addr);
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn admin_flag(&mut self) -> Vec<String> {
        let flag = admin_flag(&self.bin);
        self.admin_addr = flag.get(1).and_then(|a| a.parse().ok());
        flag
    }

    /// Spawns the process and waits until it serves; `Err` (with its log) if it exits
    /// first.
    fn launch(&mut self, observe: &mut dyn FnMut(&Broker)) -> Result<(), String> {
        self.starts += 1;
        let log = File::create(self.log_path(self.starts)).expect("create broker log");
        let o = &self.options;
        let child = Command::new(&self.bin)
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(match self.sasl_addr {
                Some(sasl) => vec![
                    "--listeners".to_string(),
                    format!("PLAINTEXT://{},SASL_PLAINTEXT://{sasl}", self.addr),
                ],
                None => vec!["--kafka-addr".to_string(), self.addr.to_string()],
            })
            .args(["--smp", &o.smp.to_string()])
            .args([
                "--offsets-topic-num-partitions",
                &o.offsets_topic_num_partitions.to_string(),
            ])
            .args([
                "--group-initial-rebalance-delay-ms",
                &o.group_initial_rebalance_delay_ms.to_string(),
            ])
            .args(["--num-partitions", &o.num_partitions.to_string()])
            .args(&o.extra_args)
            .args(self.admin_flag())
            .args(native_flags(&self.bin, self.native_addr))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        self.child = Some(child);
        self.wait_serving(observe)
    }

    /// Waits until ApiVersions succeeds; `Err` if the process exits first, panics when it
    /// is still not serving after `START_TIMEOUT`.
    fn wait_serving(&mut self, observe: &mut dyn FnMut(&Broker)) -> Result<(), String> {
        let deadline = Deadline::after(START_TIMEOUT);
        loop {
            observe(self);
            let child = self.child.as_mut().expect("just spawned");
            if let Some(status) = child.try_wait().expect("poll strand") {
                self.child = None;
                return Err(format!(
                    "strand exited ({status}) before serving; log:\n{}",
                    self.log_tail()
                ));
            }
            let last = match Client::connect(self.addr) {
                Ok(mut c) => match c.api_versions() {
                    Ok(_) => return Ok(()),
                    Err(e) => format!("{e:#}"),
                },
                Err(e) => e.to_string(),
            };
            if deadline.remaining().is_none() {
                panic!(
                    "strand not serving on {} after {START_TIMEOUT:?} ({last}); log:\n{}",
                    self.addr,
                    self.log_tail()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM, then waits up to `STOP_TIMEOUT` (SIGKILL after it, and panic).
    fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("broker is running");
        let pid = child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(
            sent.as_ref().is_ok_and(|s| s.success()),
            "kill -TERM {pid}: {sent:?}"
        );
        let deadline = Deadline::after(STOP_TIMEOUT);
        loop {
            if let Some(status) = child.try_wait().expect("poll strand") {
                return status;
            }
            if deadline.remaining().is_none() {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "strand still running {STOP_TIMEOUT:?} after SIGTERM; log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The first line of the current start's log holding every one of `parts`; panics
    /// with the log's tail when there is none.
    pub fn log_line_with(&self, parts: &[&str]) -> String {
        let text = std::fs::read_to_string(self.log_path(self.starts)).unwrap_or_default();
        text.lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no log line with {parts:?}; log:\n{}", self.log_tail()))
    }

    /// The last lines of the current start's log.
    pub fn log_tail(&self) -> String {
        let path = self.log_path(self.starts);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| format!("({e})"));
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(LOG_TAIL_LINES);
        format!("[{}]\n{}", path.display(), lines[from..].join("\n"))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            if self.child.is_some() {
                self.stop();
            }
            return;
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let tail = self.log_tail();
        let dir = if std::env::var("STRAND_KEEP_DIRS").is_ok_and(|v| v == "1") {
            let kept = self.root.take().map(tempfile::TempDir::keep);
            format!("its dir kept at {kept:?}")
        } else {
            "its dir deleted (STRAND_KEEP_DIRS=1 keeps it)".to_string()
        };
        eprintln!(
            "test failed: broker on {} killed, {dir}; log:\n{tail}",
            self.addr
        );
    }
}

/// SIGKILL's number on Linux.
const SIGKILL: i32 = 9;

/// The broker binary: `STRAND_BIN`, else `<workspace>/target/debug/strand`. Panics when
/// missing (never skips: these tests need no external client).
pub fn binary() -> PathBuf {
    let (path, from_env) = match std::env::var_os("STRAND_BIN") {
        Some(p) => (PathBuf::from(p), true),
        None => (workspace_root().join("target/debug/strand"), false),
    };
    assert!(
        path.is_file(),
        "strand binary not found at {}: run `cargo build -p strand-broker` first (or set \
         STRAND_BIN)",
        path.display()
    );
    if !from_env {
        warn_if_stale(&path);
    }
    path
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// Warns when a broker, wire or storage source is newer than the binary under test.
fn warn_if_stale(bin: &Path) {
    let Ok(built) = bin.metadata().and_then(|m| m.modified()) else {
        return;
    };
    let root = workspace_root();
    let mut newer = Vec::new();
    for dir in ["broker/src", "wire/src", "storage/src"] {
        newer_sources(&root.join(dir), built, &mut newer);
    }
    if let Some(first) = newer.first() {
        eprintln!(
            "warning: {} is older than {} (and {} more sources): run `cargo build -p \
             strand-broker` to test the current code",
            bin.display(),
            first.display(),
            newer.len() - 1
        );
    }
}

fn newer_sources(dir: &Path, than: std::time::SystemTime, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            newer_sources(&p, than, out);
        } else if e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > than)
        {
            out.push(p);
        }
    }
}

/// `strand --help`, read once.
fn help_text(bin: &Path) -> &'static str {
    static HELP: OnceLock<String> = OnceLock::new();
    HELP.get_or_init(|| {
        let out = Command::new(bin)
            .arg("--help")
            .output()
            .unwrap_or_else(|e| panic!("{} --help: {e}", bin.display()));
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

/// `--admin-addr` on a free port when the binary has that listener: its fixed default port
/// would collide between brokers running side by side.
fn admin_flag(bin: &Path) -> Vec<String> {
    if help_text(bin).contains("--admin-addr") {
        vec!["--admin-addr".into(), format!("127.0.0.1:{}", free_port())]
    } else {
        Vec::new()
    }
}

/// The native listeners on `addr` and ephemeral per-shard ports, when the binary has
/// them: their fixed default ports would collide between brokers running side by side.
fn native_flags(bin: &Path, addr: SocketAddr) -> Vec<String> {
    if help_text(bin).contains("--native-addr") {
        vec![
            "--native-addr".into(),
            addr.to_string(),
            "--native-shard-base-port".into(),
            "0".into(),
        ]
    } else {
        Vec::new()
    }
}

/// Ports a broker binds when not told otherwise: the Raft RPC listener (33145 plus one
/// per shard, bound by every single-node broker of the tests) lies inside Linux's
/// ephemeral range, so a port the kernel hands out may be one of them.
const BROKER_DEFAULT_PORTS: [std::ops::Range<u16>; 3] = [9092..9100, 9644..9645, 33145..33145 + 64];

/// A loopback port nobody listens on right now, and none a broker binds by default.
///
/// Never the same port twice in one test process: brokers of parallel tests pick ports
/// before binding them, and glommio listeners bind with SO_REUSEPORT, so two brokers
/// handed the same port would both bind it and share its connections.
fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = l.local_addr().expect("local addr").port();
        if BROKER_DEFAULT_PORTS.iter().any(|r| r.contains(&port)) {
            continue;
        }
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
}

/// How a read that waits for the peer to close ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The peer closed (EOF or reset).
    Closed,
    /// The deadline passed with the connection still open.
    StillOpen,
}

/// One connection, one request at a time.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl Client {
    /// Connects with [`IO_TIMEOUT`] for connect, reads and writes.
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Client {
            stream,
            next_correlation_id: 1,
        })
    }

    /// Authenticates with SASL PLAIN (SaslHandshake v1, SaslAuthenticate v2) on a SASL
    /// listener.
    pub fn authenticate_plain(&mut self, user: &str, password: &str) -> anyhow::Result<()> {
        use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
        let hs = self.try_request(
            1,
            &SaslHandshakeRequest::default()
                .with_mechanism(kafka_protocol::protocol::StrBytes::from_static_str("PLAIN")),
        )?;
        anyhow::ensure!(hs.error_code == 0, "SaslHandshake: error {}", hs.error_code);
        let token = format!("\0{user}\0{password}");
        let auth = self.try_request(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token)),
        )?;
        anyhow::ensure!(
            auth.error_code == 0,
            "SaslAuthenticate: error {} {:?}",
            auth.error_code,
            auth.error_message
        );
        Ok(())
    }

    /// Sets the socket read timeout (how long a response may take).
    pub fn set_read_timeout(&self, d: Duration) {
        self.stream
            .set_read_timeout(Some(d))
            .expect("set read timeout");
    }

    /// Sends `req` at `version` and decodes its response (checking the correlation id and
    /// that no bytes are left over).
    pub fn try_request<R: Request>(
        &mut self,
        version: i16,
        req: &R,
    ) -> anyhow::Result<R::Response> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let frame = encode_request(req, version, correlation_id)?;
        self.send_frame(&frame).context("sending request")?;
        let resp = self.read_frame().context("reading response")?;
        decode_response::<R>(version, correlation_id, resp)
    }

    /// [`Client::try_request`], panicking on any error.
    pub fn request<R: Request>(&mut self, version: i16, req: &R) -> R::Response {
        self.try_request(version, req)
            .unwrap_or_else(|e| panic!("{} v{version}: {e:#}", api_name(R::KEY)))
    }

    /// Writes bytes as they are.
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Writes a length prefix and `payload`.
    pub fn send_frame(&mut self, payload: &[u8]) -> io::Result<()> {
        let len = i32::try_from(payload.len()).expect("frame fits an i32");
        let mut out = Vec::with_capacity(4 + payload.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(payload);
        self.stream.write_all(&out)
    }

    /// Reads one length-prefixed response frame (without its prefix).
    pub fn read_frame(&mut self) -> io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= RESPONSE_BYTES_MAX)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("length {n}")))?;
        let mut buf = vec![0u8; n];
        self.stream.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// Closes the sending side (the peer reads EOF).
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Reads until the peer closes or `deadline` passes: the bytes read, and how it ended.
    pub fn read_until_closed(&mut self, deadline: Deadline) -> (Vec<u8>, Ending) {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let Some(left) = deadline.remaining() else {
                return (got, Ending::StillOpen);
            };
            self.set_read_timeout(left);
            match self.stream.read(&mut buf) {
                Ok(0) => return (got, Ending::Closed),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return (got, Ending::StillOpen)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return (got, Ending::Closed),
            }
        }
    }

    /// ApiVersions v3; an error unless it answers error 0.
    pub fn api_versions(&mut self) -> anyhow::Result<ApiVersionsResponse> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str("0"));
        let resp = self.try_request(3, &req)?;
        if resp.error_code != 0 || resp.api_keys.is_empty() {
            bail!(
                "ApiVersions error {} with {} keys",
                resp.error_code,
                resp.api_keys.len()
            );
        }
        Ok(resp)
    }

    /// Creates `topic` with `partitions` partitions (CreateTopics v5); panics unless OK.
    pub fn create_topic(&mut self, topic: &str, partitions: i32) {
        let t = CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1);
        let req = CreateTopicsRequest::default()
            .with_topics(vec![t])
            .with_timeout_ms(10_000);
        let resp = self.request(5, &req);
        let codes: Vec<i16> = resp.topics.iter().map(|t| t.error_code).collect();
        assert_eq!(codes, [0], "CreateTopics {topic}: {resp:?}");
    }

    /// ListOffsets v5 latest (-1) of `partitions` of `topic`, in one request: the
    /// partitions' answers.
    pub fn list_latest(
        &mut self,
        topic: &str,
        partitions: &[i32],
    ) -> Vec<ListOffsetsPartitionResponse> {
        let parts = partitions
            .iter()
            .map(|&p| {
                ListOffsetsPartition::default()
                    .with_partition_index(p)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-1)
            })
            .collect();
        let req = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(parts)]);
        let resp = self.request(5, &req);
        resp.topics.into_iter().flat_map(|t| t.partitions).collect()
    }

    /// ListOffsets v5 latest (-1): the high watermark of one partition (retried while the
    /// partition is not yet served, as after a restart).
    pub fn latest_offset(&mut self, topic: &str, partition: i32) -> i64 {
        let deadline = Deadline::after(IO_TIMEOUT);
        loop {
            let answers = self.list_latest(topic, &[partition]);
            let p = answers
                .first()
                .unwrap_or_else(|| panic!("ListOffsets {topic}-{partition}: no answer"));
            if p.error_code == 0 {
                return p.offset;
            }
            assert!(
                RETRIABLE_PARTITION_ERRORS.contains(&p.error_code)
                    && deadline.remaining().is_some(),
                "ListOffsets {topic}-{partition}: {p:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// InitProducerId v4 without a transactional id (an idempotent producer): its
    /// (producer id, epoch), checked error-free.
    pub fn init_producer_id(&mut self) -> (i64, i16) {
        let req = kafka_protocol::messages::InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let resp = self.request(4, &req);
        assert_eq!(resp.error_code, 0, "InitProducerId: {resp:?}");
        (resp.producer_id.0, resp.producer_epoch)
    }

    /// Produce v9 of one batch to one partition; the partition's response.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        acks: i16,
    ) -> PartitionProduceResponse {
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch))])]);
        let resp = self.request(9, &req);
        resp.responses
            .into_iter()
            .next()
            .and_then(|t| t.partition_responses.into_iter().next())
            .expect("one partition response")
    }

    /// Waits until FindCoordinator (v3, group key) answers error 0 for `group`.
    pub fn wait_coordinator(&mut self, group: &str, deadline: Deadline) {
        self.wait_coordinator_of(group, 0, deadline);
    }

    /// Waits until FindCoordinator (v3) answers error 0 for `key` of `key_type` (0 group,
    /// 1 transactional id: the first one creates `__transaction_state`).
    pub fn wait_coordinator_of(&mut self, key: &str, key_type: i8, deadline: Deadline) {
        loop {
            let req = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(key.to_string()))
                .with_key_type(key_type);
            let resp = self.request(3, &req);
            if resp.error_code == 0 {
                return;
            }
            assert!(
                deadline.remaining().is_some(),
                "no coordinator for {key}: {resp:?}"
            );
            std::thread::sleep(POLL);
        }
    }
}

/// A topic name for requests.
pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// `Produce`, `JoinGroup`, ... for messages.
pub fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|_| format!("api {key}"), |k| format!("{k:?}"))
}

/// Request header and body, without the length prefix.
pub fn encode_request<R: Request>(
    req: &R,
    version: i16,
    correlation_id: i32,
) -> anyhow::Result<Vec<u8>> {
    let mut buf = encode_header(R::KEY, version, correlation_id, R::header_version(version))?;
    req.encode(&mut buf, version)
        .with_context(|| format!("encoding {} v{version}", api_name(R::KEY)))?;
    Ok(buf.to_vec())
}

/// A request header for any key and version (also ones the broker does not know).
pub fn encode_header(
    key: i16,
    version: i16,
    correlation_id: i32,
    header_version: i16,
) -> anyhow::Result<BytesMut> {
    let header = RequestHeader::default()
        .with_request_api_key(key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, header_version)
        .context("encoding request header")?;
    Ok(buf)
}

/// Decodes a response frame of `R` at `version`.
pub fn decode_response<R: Request>(
    version: i16,
    correlation_id: i32,
    frame: Vec<u8>,
) -> anyhow::Result<R::Response> {
    let mut buf = Bytes::from(frame);
    let header = ResponseHeader::decode(&mut buf, R::Response::header_version(version))
        .context("decoding response header")?;
    if header.correlation_id != correlation_id {
        bail!(
            "correlation id {} in response to request {correlation_id}",
            header.correlation_id
        );
    }
    let resp = R::Response::decode(&mut buf, version)
        .with_context(|| format!("decoding {} v{version} response", api_name(R::KEY)))?;
    if buf.has_remaining() {
        bail!(
            "{} bytes left after the {} v{version} response",
            buf.remaining(),
            api_name(R::KEY)
        );
    }
    Ok(resp)
}
