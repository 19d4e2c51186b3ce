//! Kafka listeners as Kafka configures them (issue 23): `listeners`
//! (`NAME://host:port,...`), `advertised_listeners` (what clients are told, per name), and
//! `listener_security_protocol_map` (`NAME:PROTOCOL,...`; the four protocol names map to
//! themselves). Parsed and checked here, once, at start.
//!
//! Invariant: every listener has a distinct name and a distinct bind address, a known
//! security protocol, and an advertised host and port; an advertised name that is not a
//! listener, a custom name without a protocol, or an unspecified advertised host
//! (0.0.0.0) is an error naming the entry.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{bail, Context};

/// Most listeners one node serves.
pub const LISTENERS_MAX: usize = 8;

/// How a listener's connections are secured (Kafka's `security.protocol` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SecurityProtocol {
    /// No encryption, no authentication.
    Plaintext,
    /// TLS; the principal is the client certificate's (mutual TLS) or ANONYMOUS.
    Ssl,
    /// SASL authentication, no encryption.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's name of it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The protocol Kafka names `name` (case-insensitive), if any.
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Whether its connections are TLS.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether its connections authenticate with SASL before anything else.
    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// One Kafka listener.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ListenerConfig {
    /// Its name (upper case, as Kafka compares them).
    pub name: String,
    /// How its connections are secured.
    pub protocol: SecurityProtocol,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Host clients are told for it.
    pub advertised_host: String,
    /// Port clients are told for it.
    pub advertised_port: u16,
}

/// Splits `NAME://host:port` into its name and address text.
fn split_entry(entry: &str) -> anyhow::Result<(String, &str)> {
    let (name, hostport) = entry
        .split_once("://")
        .with_context(|| format!("listener '{entry}' is not NAME://host:port"))?;
    let name = name.trim().to_ascii_uppercase();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        bail!("listener '{entry}': the name must be letters, digits, '_' or '-'");
    }
    Ok((name, hostport.trim()))
}

/// Splits `host:port` (`[v6]:port`, or `:port` for every address) into host and port.
fn host_port(entry: &str, hostport: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = hostport
        .rsplit_once(':')
        .with_context(|| format!("listener '{entry}' has no port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow::anyhow!("listener '{entry}': '{port}' is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), port))
}

/// Parses `NAME:PROTOCOL,...` over the defaults (each protocol name maps to itself).
fn protocol_map(map: Option<&str>) -> anyhow::Result<BTreeMap<String, SecurityProtocol>> {
    let mut out: BTreeMap<String, SecurityProtocol> =
        ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
            .into_iter()
            .filter_map(|n| Some((n.to_string(), SecurityProtocol::parse(n)?)))
            .collect();
    for item in map
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        let (name, proto) = item.split_once(':').with_context(|| {
            format!("listener_security_protocol_map entry '{item}' is not NAME:PROTOCOL")
        })?;
        let proto = SecurityProtocol::parse(proto.trim()).with_context(|| {
            format!(
                "listener_security_protocol_map entry '{item}': the protocol must be \
                 PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            )
        })?;
        out.insert(name.trim().to_ascii_uppercase(), proto);
    }
    Ok(out)
}

/// Parses `listeners` (and `advertised_listeners`, `listener_security_protocol_map`);
/// a listener not in `advertised` is advertised as `default_host` (or its own IP when
/// there is none) and its own port.
pub fn parse(
    listeners: &str,
    advertised: Option<&str>,
    map: Option<&str>,
    default_host: Option<&str>,
) -> anyhow::Result<Vec<ListenerConfig>> {
    let protocols = protocol_map(map)?;
    let mut out: Vec<ListenerConfig> = Vec::new();
    for entry in listeners
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (name, hostport) = split_entry(entry)?;
        let (host, port) = host_port(entry, hostport)?;
        let addr = resolve(entry, &host, port)?;
        let protocol = *protocols.get(&name).with_context(|| {
            format!(
                "listener '{entry}': name {name} has no protocol in listener_security_protocol_map"
            )
        })?;
        if out.iter().any(|l| l.name == name || l.addr == addr) {
            bail!("listener '{entry}': names and addresses must be distinct");
        }
        let advertised_host = default_host.map_or_else(|| addr.ip().to_string(), str::to_string);
        out.push(ListenerConfig {
            name,
            protocol,
            addr,
            advertised_host,
            advertised_port: port,
        });
    }
    if out.is_empty() {
        bail!("listeners is empty: give at least one NAME://host:port");
    }
    if out.len() > LISTENERS_MAX {
        bail!("at most {LISTENERS_MAX} listeners, got {}", out.len());
    }
    for entry in advertised
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (name, hostport) = split_entry(entry)?;
        let (host, port) = host_port(entry, hostport)?;
        let l = out.iter_mut().find(|l| l.name == name).with_context(|| {
            format!("advertised listener '{entry}': no listener is named {name}")
        })?;
        if host.is_empty()
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_unspecified())
        {
            bail!(
                "advertised listener '{entry}': clients need a host they can reach, not '{host}'"
            );
        }
        l.advertised_host = host;
        l.advertised_port = port;
    }
    Ok(out)
}

/// The bind address of a listener's host (empty: every IPv4 address).
fn resolve(entry: &str, host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| format!("listener '{entry}': cannot resolve host '{host}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_are_kafkas() {
        for p in ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] {
            assert_eq!(SecurityProtocol::parse(p).map(|p| p.name()), Some(p));
        }
        assert_eq!(
            SecurityProtocol::parse("sasl_ssl"),
            Some(SecurityProtocol::SaslSsl)
        );
        assert_eq!(SecurityProtocol::parse("TLS"), None);
        assert!(SecurityProtocol::SaslSsl.tls() && SecurityProtocol::SaslSsl.sasl());
        assert!(!SecurityProtocol::Ssl.sasl() && !SecurityProtocol::SaslPlaintext.tls());
    }

    #[test]
    fn listeners_parse_as_kafka_writes_them() {
        let l = parse(
            "PLAINTEXT://127.0.0.1:9092, SASL_SSL://:9094,internal://[::1]:9095",
            Some("SASL_SSL://broker1.example.com:19094"),
            Some("INTERNAL:SSL"),
            None,
        )
        .expect("valid");
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].name, "PLAINTEXT");
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(
            (l[0].advertised_host.as_str(), l[0].advertised_port),
            ("127.0.0.1", 9092)
        );
        assert_eq!(l[1].addr, "0.0.0.0:9094".parse().expect("addr"));
        assert_eq!(l[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            (l[1].advertised_host.as_str(), l[1].advertised_port),
            ("broker1.example.com", 19094)
        );
        assert_eq!(l[2].name, "INTERNAL");
        assert_eq!(l[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[2].addr, "[::1]:9095".parse().expect("addr"));
    }

    #[test]
    fn the_default_host_is_advertised_when_given() {
        let l = parse("PLAINTEXT://0.0.0.0:9092", None, None, Some("node1")).expect("valid");
        assert_eq!(l[0].advertised_host, "node1");
    }

    #[test]
    fn bad_listeners_are_refused_with_the_entry_named() {
        let err = |listeners: &str, adv: Option<&str>, map: Option<&str>| {
            parse(listeners, adv, map, None)
                .expect_err(listeners)
                .to_string()
        };
        assert!(err("", None, None).contains("empty"));
        assert!(err("127.0.0.1:9092", None, None).contains("NAME://"));
        assert!(err("PLAINTEXT://127.0.0.1", None, None).contains("no port"));
        assert!(err("PLAINTEXT://127.0.0.1:x", None, None).contains("not a port"));
        assert!(err("EXTERNAL://127.0.0.1:9092", None, None).contains("no protocol"));
        assert!(err(
            "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093",
            None,
            None
        )
        .contains("distinct"));
        assert!(err(
            "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092",
            None,
            None
        )
        .contains("distinct"));
        assert!(err("A://127.0.0.1:9092", None, Some("A:TLS")).contains("protocol must be"));
        assert!(err("SSL://127.0.0.1:9092", Some("SASL_SSL://h:1"), None).contains("no listener"));
        assert!(err("SSL://127.0.0.1:9092", Some("SSL://0.0.0.0:1"), None).contains("reach"));
        assert!(err("SSL://127.0.0.1:9092", Some("SSL://:1"), None).contains("reach"));
    }
}
