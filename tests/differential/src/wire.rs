//! One blocking Kafka connection per broker, and requests with their type erased so that
//! a corpus can hold requests of every API in one table.
//!
//! Invariant: a response is read only after its length prefix passed [`RESPONSE_BYTES_MAX`],
//! and a response whose correlation id differs from the request's is an error, never
//! skipped. A connection the broker closed (or that failed) is dropped and reopened by the
//! next exchange, so one case that makes a broker hang up does not spoil the next.
//! Deliberately absent: pipelining, retries, TLS/SASL.

use std::any::Any;
use std::fmt::Debug;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, FetchResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

/// Largest response we read (Kafka's `socket.request.max.bytes` default). The corpus asks
/// for far less; a larger prefix means a framing bug and fails the exchange.
pub const RESPONSE_BYTES_MAX: usize = 100 * 1024 * 1024;

/// How long one exchange may take. JoinGroup waits for a rebalance, which with
/// `group.initial.rebalance.delay.ms=0` and one member completes at once; 20 s leaves
/// room for a loaded 2-core machine.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// Client id of every request: both brokers see the same one (DescribeGroups echoes it).
pub const CLIENT_ID: &str = "strand-diff";

/// A decoded response: its `Debug` text, plus the record sets it carries (Fetch), which
/// the comparison decodes record by record instead of comparing raw bytes.
pub struct Decoded {
    /// `{:?}` of the decoded response struct.
    pub debug: String,
    /// Each `records` field of a Fetch response, in the order `debug` shows them.
    pub record_sets: Vec<Option<Bytes>>,
    /// Bytes left in the frame after the response decoded: a framing bug if non-zero.
    pub trailing_bytes: usize,
}

/// What a broker did with one request.
pub enum Outcome {
    /// It answered and the answer decoded at the request's version.
    Answer(Decoded),
    /// It closed the connection without answering.
    Closed,
    /// Something else: a timeout, an undecodable answer, an I/O error.
    Failed(String),
}

/// A request of any API.
pub trait AnyRequest {
    /// The API key.
    fn api(&self) -> ApiKey;
    /// The body encoded at `version`.
    fn body(&self, version: i16) -> anyhow::Result<BytesMut>;
    /// Decodes a response body at `version`.
    fn decode_response(&self, body: Bytes, version: i16) -> anyhow::Result<Decoded>;
    /// `{:?}` of the request, for the report.
    fn describe(&self) -> String;
}

impl<R> AnyRequest for R
where
    R: Request + Debug + 'static,
    R::Response: Debug + 'static,
{
    fn api(&self) -> ApiKey {
        ApiKey::try_from(R::KEY).expect("kafka-protocol request types carry known api keys")
    }
    fn body(&self, version: i16) -> anyhow::Result<BytesMut> {
        let mut out = BytesMut::new();
        self.encode(&mut out, version)?;
        Ok(out)
    }
    fn decode_response(&self, mut body: Bytes, version: i16) -> anyhow::Result<Decoded> {
        let resp = R::Response::decode(&mut body, version)?;
        Ok(Decoded {
            debug: format!("{resp:?}"),
            record_sets: record_sets(&resp),
            trailing_bytes: body.remaining(),
        })
    }
    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

fn record_sets(resp: &dyn Any) -> Vec<Option<Bytes>> {
    let Some(fetch) = resp.downcast_ref::<FetchResponse>() else {
        return Vec::new();
    };
    let partitions = fetch.responses.iter().flat_map(|t| t.partitions.iter());
    partitions.map(|p| p.records.clone()).collect()
}

/// The versions one exchange uses: the header's, the body's encoding and the response's
/// decoding. They differ only in cases that send a version the broker does not know.
#[derive(Clone, Copy, Debug)]
pub struct WireVersions {
    /// `request_api_version` in the header.
    pub header: i16,
    /// Version the body is encoded at.
    pub body: i16,
    /// Version the response is decoded at.
    pub response: i16,
}

impl WireVersions {
    /// All three the same.
    pub fn at(version: i16) -> WireVersions {
        WireVersions {
            header: version,
            body: version,
            response: version,
        }
    }
}

/// One connection to one broker, reopened after the broker closes it.
pub struct Conn {
    addr: String,
    stream: Option<TcpStream>,
    next_correlation_id: i32,
}

impl Conn {
    /// A connection to `addr` (HOST:PORT), opened at the first exchange.
    pub fn new(addr: &str) -> Conn {
        Conn {
            addr: addr.to_string(),
            stream: None,
            next_correlation_id: 1,
        }
    }

    /// Sends `req` and classifies what came back.
    pub fn exchange(&mut self, req: &dyn AnyRequest, v: WireVersions) -> Outcome {
        let body = match req.body(v.body) {
            Ok(b) => b,
            Err(e) => return Outcome::Failed(format!("encoding v{}: {e:#}", v.body)),
        };
        let answer = match self.roundtrip(req.api(), v.header, v.response, &body) {
            Ok(Some(a)) => a,
            Ok(None) => return Outcome::Closed,
            Err(e) => return Outcome::Failed(format!("{e:#}")),
        };
        match req.decode_response(answer, v.response) {
            Ok(d) => Outcome::Answer(d),
            Err(e) => Outcome::Failed(format!("decoding the v{} response: {e:#}", v.response)),
        }
    }

    /// Sends `req` at `version` and returns the typed response (setup and preparation
    /// steps, which are not compared).
    pub fn call<R: Request>(&mut self, req: &R, version: i16) -> anyhow::Result<R::Response> {
        let api = ApiKey::try_from(R::KEY).map_err(|()| anyhow!("unknown api {}", R::KEY))?;
        let mut body = BytesMut::new();
        req.encode(&mut body, version)
            .with_context(|| format!("encoding {api:?} v{version}"))?;
        let mut answer = self
            .roundtrip(api, version, version, &body)?
            .ok_or_else(|| anyhow!("{}: closed the connection on {api:?} v{version}", self.addr))?;
        R::Response::decode(&mut answer, version)
            .with_context(|| format!("{}: decoding {api:?} v{version}", self.addr))
    }

    /// Frames and sends one request; the response body after its header, or `None` when
    /// the broker closed the connection instead of answering.
    fn roundtrip(
        &mut self,
        api: ApiKey,
        header_version: i16,
        response_version: i16,
        body: &[u8],
    ) -> anyhow::Result<Option<Bytes>> {
        let result = self.roundtrip_once(api, header_version, response_version, body);
        if !matches!(result, Ok(Some(_))) {
            self.stream = None;
        }
        result
    }

    fn roundtrip_once(
        &mut self,
        api: ApiKey,
        header_version: i16,
        response_version: i16,
        body: &[u8],
    ) -> anyhow::Result<Option<Bytes>> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(header_version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&[0; 4]);
        header.encode(&mut frame, api.request_header_version(header_version))?;
        frame.extend_from_slice(body);
        let size = i32::try_from(frame.len() - 4).context("request too large")?;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        let addr = self.addr.clone();
        let stream = self.stream()?;
        if let Err(e) = stream.write_all(&frame) {
            return closed_or(e, &addr);
        }
        let mut len = [0u8; 4];
        if let Err(e) = stream.read_exact(&mut len) {
            return closed_or(e, &addr);
        }
        let size = usize::try_from(i32::from_be_bytes(len))
            .ok()
            .filter(|&n| n <= RESPONSE_BYTES_MAX)
            .ok_or_else(|| anyhow!("{addr}: response length prefix {len:?} out of range"))?;
        let mut buf = vec![0u8; size];
        stream
            .read_exact(&mut buf)
            .with_context(|| format!("{addr}: reading a {size} byte response"))?;
        let mut buf = Bytes::from(buf);
        let rh = ResponseHeader::decode(&mut buf, api.response_header_version(response_version))
            .with_context(|| format!("{addr}: response header"))?;
        if rh.correlation_id != correlation_id {
            bail!(
                "{addr}: correlation id {} for request {correlation_id}",
                rh.correlation_id
            );
        }
        Ok(Some(buf))
    }

    fn stream(&mut self) -> anyhow::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let sock = self
                .addr
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| anyhow!("{} does not resolve", self.addr))?;
            let s = TcpStream::connect_timeout(&sock, EXCHANGE_TIMEOUT)
                .with_context(|| format!("connecting to {}", self.addr))?;
            s.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
            s.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
        }
        Ok(self.stream.as_mut().expect("the stream was just opened"))
    }
}

/// EOF or a reset is the broker hanging up (`Ok(None)`); a timeout or other error is not.
fn closed_or(e: std::io::Error, addr: &str) -> anyhow::Result<Option<Bytes>> {
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => Ok(None),
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            bail!("{addr}: no answer within {} s", EXCHANGE_TIMEOUT.as_secs())
        }
        _ => Err(anyhow!(e).context(format!("{addr}: i/o"))),
    }
}
