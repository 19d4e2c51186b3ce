//! A blocking Kafka protocol client over one std `TcpStream`: framing, version
//! negotiation and request/response round trips, with the `kafka-protocol` crate's
//! message types. A CLI sends one request at a time, so there is no async runtime and no
//! pipelining.
//!
//! Invariant: every request is sent at a version both sides support — the broker's
//! ApiVersions range intersected with our codec range and [`API_VERSION_CAPS`] (the
//! highest version whose fields this tool fills in) — and a response is read only after
//! its 4-byte length prefix passed the [`RESPONSE_BYTES_MAX`] check. A response whose
//! correlation id differs from the request's is an error, never skipped.
//!
//! Deliberately absent: retries, leader routing (requests go to the one connected broker,
//! which is what a single-node Strand or a test broker needs). TLS and SASL come from
//! `--command-config` (`secure`).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// Largest response frame we allocate for: Kafka's `socket.request.max.bytes` default
/// (100 MiB), far above any answer a CLI asks for (fetches ask for at most
/// [`crate::consume::FETCH_BYTES_MAX`]). A larger length prefix fails the command.
pub const RESPONSE_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Client id sent in every request header.
pub const CLIENT_ID: &str = "strandctl";

/// Highest version of each API this tool fills in correctly; newer versions replace
/// fields we set (topic names by topic ids in Fetch v13+, Produce v13+, DeleteTopics v6+
/// and OffsetFetch v8+; one key by a key array in FindCoordinator v4+).
pub const API_VERSION_CAPS: &[(ApiKey, i16)] = &[
    (ApiKey::ApiVersions, 0),
    (ApiKey::Metadata, 12),
    (ApiKey::CreateTopics, 7),
    (ApiKey::DeleteTopics, 5),
    (ApiKey::CreatePartitions, 3),
    (ApiKey::DescribeConfigs, 4),
    (ApiKey::IncrementalAlterConfigs, 1),
    (ApiKey::ListOffsets, 7),
    (ApiKey::Produce, 9),
    (ApiKey::Fetch, 12),
    (ApiKey::FindCoordinator, 3),
    (ApiKey::ListGroups, 5),
    (ApiKey::DescribeGroups, 5),
    (ApiKey::DeleteGroups, 2),
    (ApiKey::OffsetFetch, 7),
    (ApiKey::OffsetCommit, 8),
    (ApiKey::DescribeCluster, 1),
];

/// What can go wrong talking to a broker. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// SASL authentication failed (or the server's SCRAM signature did not verify).
    #[error("authentication at {addr} failed: {why} — check --command-config")]
    Auth {
        /// Address given.
        addr: String,
        /// Why.
        why: String,
    },
    /// The address does not resolve.
    #[error("cannot resolve {addr}: {cause} — pass --brokers HOST:PORT")]
    Resolve {
        /// Address given.
        addr: String,
        /// Resolver error.
        cause: std::io::Error,
    },
    /// No TCP connection.
    #[error(
        "cannot connect to {addr}: {cause} — is strand running? start it with `make run`, \
         or point --brokers (env STRANDCTL_BROKERS) at its Kafka port"
    )]
    Connect {
        /// Address tried.
        addr: String,
        /// Socket error.
        cause: std::io::Error,
    },
    /// The broker did not answer in time.
    #[error(
        "{addr}: no answer to {api:?} within {timeout_ms} ms — is {addr} a Kafka port \
         (not the admin HTTP port)? raise --request-timeout-ms for a slow broker"
    )]
    Timeout {
        /// Broker.
        addr: String,
        /// API waiting.
        api: ApiKey,
        /// Socket timeout.
        timeout_ms: u64,
    },
    /// The connection failed mid-request.
    #[error("{addr}: connection failed during {api:?}: {cause}")]
    Io {
        /// Broker.
        addr: String,
        /// API in flight.
        api: ApiKey,
        /// Socket error.
        cause: std::io::Error,
    },
    /// A response length prefix above the limit.
    #[error("{addr}: {api:?} response of {size_bytes} bytes exceeds the {RESPONSE_BYTES_MAX} byte limit")]
    TooLarge {
        /// Broker.
        addr: String,
        /// API.
        api: ApiKey,
        /// Announced size.
        size_bytes: i64,
    },
    /// No version both sides speak.
    #[error(
        "{addr}: the broker does not support {api:?} at a version strandctl speaks \
         (broker: {broker}, strandctl: {ours}) — this command needs a newer broker"
    )]
    Unsupported {
        /// Broker.
        addr: String,
        /// API.
        api: ApiKey,
        /// The broker's range, or "none".
        broker: String,
        /// Our range.
        ours: String,
    },
    /// Our own request failed to encode (a bug or a value out of the version's range).
    #[error("encoding the {api:?} v{version} request: {detail}")]
    Encode {
        /// API.
        api: ApiKey,
        /// Version.
        version: i16,
        /// Codec message.
        detail: String,
    },
    /// The response did not decode.
    #[error("{addr}: cannot decode the {api:?} v{version} response: {detail}")]
    Decode {
        /// Broker.
        addr: String,
        /// API.
        api: ApiKey,
        /// Version.
        version: i16,
        /// Codec message.
        detail: String,
    },
    /// A response to some other request.
    #[error("{addr}: response correlation id {got} does not match request {want}")]
    Correlation {
        /// Broker.
        addr: String,
        /// Expected.
        want: i32,
        /// Received.
        got: i32,
    },
    /// The broker answered with an error code.
    #[error("{what}: {name} (Kafka error code {code}){detail}")]
    Broker {
        /// What was being done.
        what: String,
        /// Kafka's name of the error.
        name: String,
        /// The code.
        code: i16,
        /// The broker's message, if any, with a leading separator.
        detail: String,
    },
}

/// Turns a Kafka error code into `Err` naming `what` failed (0 is success).
pub fn check_code(code: i16, what: &str, message: Option<&StrBytes>) -> Result<(), KafkaError> {
    match code.err() {
        None => Ok(()),
        Some(e) => Err(KafkaError::Broker {
            what: what.to_string(),
            name: e.to_string(),
            code,
            detail: message
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {}", m.as_str()))
                .unwrap_or_default(),
        }),
    }
}

/// Kafka's name of an error code (empty for 0), for tables.
pub fn code_name(code: i16) -> String {
    code.err().map(|e| e.to_string()).unwrap_or_default()
}

/// One connection to one broker, with the versions negotiated at connect.
pub struct KafkaClient {
    stream: crate::secure::Stream,
    addr: String,
    timeout: Duration,
    next_correlation_id: i32,
    /// The broker's (api key, min, max) from ApiVersions.
    broker_versions: Vec<(i16, i16, i16)>,
}

impl KafkaClient {
    /// Connects to `addr` (HOST:PORT) and negotiates versions with ApiVersions.
    pub fn connect(addr: &str, timeout: Duration) -> Result<KafkaClient, KafkaError> {
        let resolved: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|cause| KafkaError::Resolve {
                addr: addr.to_string(),
                cause,
            })?
            .collect();
        let mut last = std::io::Error::new(ErrorKind::NotFound, "no address");
        let mut stream = None;
        for a in &resolved {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let Some(stream) = stream else {
            return Err(KafkaError::Connect {
                addr: addr.to_string(),
                cause: last,
            });
        };
        let io = |cause| KafkaError::Connect {
            addr: addr.to_string(),
            cause,
        };
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let settings = crate::secure::settings();
        let stream = crate::secure::wrap(stream, addr, &settings).map_err(io)?;
        let mut client = KafkaClient {
            stream,
            addr: addr.to_string(),
            timeout,
            next_correlation_id: 1,
            broker_versions: Vec::new(),
        };
        let resp = client.send_at(&ApiVersionsRequest::default(), 0)?;
        check_code(resp.error_code, "ApiVersions", None)?;
        client.broker_versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        if let Some(sasl) = &settings.sasl {
            client.authenticate(sasl)?;
        }
        Ok(client)
    }

    /// SASL: SaslHandshake v1, then SaslAuthenticate v1 rounds of the mechanism.
    fn authenticate(&mut self, sasl: &crate::secure::Sasl) -> Result<(), KafkaError> {
        use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
        let hs = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(sasl.mechanism.clone()));
        let resp = self.send_at(&hs, 1)?;
        check_code(resp.error_code, "SaslHandshake", None)?;
        let addr = self.addr.clone();
        let auth_failed = |why: String| KafkaError::Auth {
            addr: addr.clone(),
            why,
        };
        let mut round = |token: Vec<u8>| -> Result<Bytes, KafkaError> {
            let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let resp = self.send_at(&req, 1)?;
            check_code(
                resp.error_code,
                "SaslAuthenticate",
                resp.error_message.as_ref(),
            )?;
            Ok(resp.auth_bytes)
        };
        if sasl.mechanism == "PLAIN" {
            round(format!("\0{}\0{}", sasl.username, sasl.password).into_bytes())?;
            return Ok(());
        }
        let mut scram =
            crate::secure::ScramClient::new(&sasl.mechanism, &sasl.username, &sasl.password);
        let server_first = round(scram.first())?;
        let last = scram
            .answer(&server_first)
            .map_err(|e| auth_failed(format!("{e:#}")))?;
        let server_final = round(last)?;
        scram
            .verify(&server_final)
            .map_err(|e| auth_failed(format!("{e:#}")))
    }

    /// The connect/read timeout this client was made with.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The broker address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The version `R` will be sent at, or why there is none.
    pub fn version_of<R: Request>(&self) -> Result<i16, KafkaError> {
        let api = api_key(R::KEY);
        let cap = API_VERSION_CAPS
            .iter()
            .find(|(k, _)| *k == api)
            .map_or(R::VERSIONS.max, |(_, v)| *v);
        let ours = (R::VERSIONS.min, cap.min(R::VERSIONS.max));
        let broker = self.broker_versions.iter().find(|(k, _, _)| *k == R::KEY);
        negotiate(ours, broker.map(|&(_, lo, hi)| (lo, hi))).ok_or_else(|| {
            KafkaError::Unsupported {
                addr: self.addr.clone(),
                api,
                broker: broker.map_or("none".into(), |(_, lo, hi)| format!("v{lo}..=v{hi}")),
                ours: format!("v{}..=v{}", ours.0, ours.1),
            }
        })
    }

    /// Sends `req` at the negotiated version and returns the decoded response.
    pub fn send<R: Request>(&mut self, req: &R) -> Result<R::Response, KafkaError> {
        let version = self.version_of::<R>()?;
        self.send_at(req, version)
    }

    /// Sends `req` at `version` and decodes the response at the same version.
    pub fn send_at<R: Request>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<R::Response, KafkaError> {
        let api = api_key(R::KEY);
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = encode_request(req, version, correlation_id)?;
        self.stream
            .write_all(&frame)
            .map_err(|e| self.io_error(api, e))?;
        let mut body = self.read_frame(api)?;
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| self.decode_error(api, version, e))?;
        if header.correlation_id != correlation_id {
            return Err(KafkaError::Correlation {
                addr: self.addr.clone(),
                want: correlation_id,
                got: header.correlation_id,
            });
        }
        R::Response::decode(&mut body, version).map_err(|e| self.decode_error(api, version, e))
    }

    /// Sends `req` and reads nothing back (Produce with acks=0 has no response).
    pub fn send_without_response<R: Request>(&mut self, req: &R) -> Result<(), KafkaError> {
        let version = self.version_of::<R>()?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = encode_request(req, version, correlation_id)?;
        self.stream
            .write_all(&frame)
            .map_err(|e| self.io_error(api_key(R::KEY), e))
    }

    fn read_frame(&mut self, api: ApiKey) -> Result<Bytes, KafkaError> {
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .map_err(|e| self.io_error(api, e))?;
        let size = i32::from_be_bytes(len);
        let size_bytes = usize::try_from(size)
            .ok()
            .filter(|&n| n <= RESPONSE_BYTES_MAX)
            .ok_or(KafkaError::TooLarge {
                addr: self.addr.clone(),
                api,
                size_bytes: i64::from(size),
            })?;
        let mut buf = vec![0u8; size_bytes];
        self.stream
            .read_exact(&mut buf)
            .map_err(|e| self.io_error(api, e))?;
        Ok(Bytes::from(buf))
    }

    fn io_error(&self, api: ApiKey, cause: std::io::Error) -> KafkaError {
        match cause.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => KafkaError::Timeout {
                addr: self.addr.clone(),
                api,
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            },
            _ => KafkaError::Io {
                addr: self.addr.clone(),
                api,
                cause,
            },
        }
    }

    fn decode_error(&self, api: ApiKey, version: i16, e: anyhow::Error) -> KafkaError {
        KafkaError::Decode {
            addr: self.addr.clone(),
            api,
            version,
            detail: format!("{e:#}"),
        }
    }
}

fn api_key(key: i16) -> ApiKey {
    // `R::KEY` comes from the codec's own request types, so it is always a known key.
    ApiKey::try_from(key).expect("kafka-protocol request types carry known api keys")
}

/// The highest version in both ranges, if they overlap.
pub fn negotiate(ours: (i16, i16), broker: Option<(i16, i16)>) -> Option<i16> {
    let (lo, hi) = broker?;
    let v = ours.1.min(hi);
    (v >= ours.0.max(lo)).then_some(v)
}

/// A request frame: length prefix, header, body.
pub fn encode_request<R: Request>(
    req: &R,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, KafkaError> {
    let api = api_key(R::KEY);
    let bad = |e: anyhow::Error| KafkaError::Encode {
        api,
        version,
        detail: format!("{e:#}"),
    };
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let header_version = R::header_version(version);
    let size = header.compute_size(header_version).map_err(bad)?
        + req.compute_size(version).map_err(bad)?;
    let size_prefix = i32::try_from(size).map_err(|_| KafkaError::Encode {
        api,
        version,
        detail: format!("request of {size} bytes does not fit a frame"),
    })?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.extend_from_slice(&size_prefix.to_be_bytes());
    header.encode(&mut out, header_version).map_err(bad)?;
    req.encode(&mut out, version).map_err(bad)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(negotiate((0, 12), Some((1, 9))), Some(9));
        assert_eq!(negotiate((0, 5), Some((1, 9))), Some(5));
        assert_eq!(negotiate((4, 5), Some((0, 3))), None);
        assert_eq!(negotiate((0, 5), None), None);
    }

    #[test]
    fn request_frame_has_its_length_prefix_and_header() {
        let frame = encode_request(&MetadataRequest::default(), 1, 42).expect("encodes");
        let len = i32::from_be_bytes(frame[..4].try_into().expect("4 bytes"));
        assert_eq!(usize::try_from(len).expect("positive"), frame.len() - 4);
        assert_eq!(&frame[4..6], &3i16.to_be_bytes(), "api key 3 = Metadata");
        assert_eq!(&frame[6..8], &1i16.to_be_bytes());
        assert_eq!(&frame[8..12], &42i32.to_be_bytes());
    }

    #[test]
    fn error_codes_are_named() {
        assert!(check_code(0, "x", None).is_ok());
        let e = check_code(36, "create topic t", None).expect_err("36 is an error");
        assert!(e.to_string().contains("TopicAlreadyExists") || e.to_string().contains("TOPIC"));
        assert_eq!(code_name(0), "");
    }
}
