//! TLS for the SSL and SASL_SSL listeners and between nodes (issue 23): rustls (TLS 1.2
//! and 1.3, ring's algorithms) with the certificate chain and key from PEM files, client
//! certificates verified against a CA file when `ssl_client_auth` asks for them (always
//! between nodes: `RpcConfigs`), and the files read again when they change (`Reloading`),
//! so a renewed certificate is served without a restart.
//!
//! Invariant: a new connection always gets a complete, valid configuration: files that do
//! not load (half-written, mismatched key) leave the previous one in service and are
//! reported; they are tried again when they change again.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::common::config::{ClientAuth, SslConfig};

/// Errors loading the TLS files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the kind needed.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the combination (key not matching the certificate, bad CA).
    #[error("TLS configuration: {0}")]
    Config(String),
    /// A TLS listener without `ssl_certificate_location` and `ssl_key_location`.
    #[error("no TLS certificate and key configured")]
    Missing,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The certificates of a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE in it".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    if pem
        .windows(b"ENCRYPTED PRIVATE KEY".len())
        .any(|w| w == b"ENCRYPTED PRIVATE KEY")
    {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "the key is encrypted: decrypt it (openssl pkey -in key.pem -out plain.pem) \
                   and keep the file readable by the broker only"
                .into(),
        });
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        path: path.to_path_buf(),
        what: format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
    })
}

/// ring's algorithms: rustls 0.23.48 deprecated them for having no post-quantum key
/// exchange (aws-lc-rs has X25519MLKEM768, but needs cmake to build, which a fresh machine
/// with only the Rust toolchain lacks). TLS 1.3 with X25519, P-256 and P-384 remains.
#[expect(deprecated, reason = "ring is chosen: see the comment")]
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls server configuration `ssl` describes (reads its files: blocking, small).
/// `ssl.client_auth` applies to SSL listeners only; SASL_SSL ones ask for no client
/// certificate (the client authenticates with SASL), as Kafka since KIP-684 unless the
/// listener's own `ssl.client.auth` is set.
pub fn server_config(ssl: &SslConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let (Some(cert), Some(key)) = (&ssl.certificate_location, &ssl.key_location) else {
        return Err(TlsError::Missing);
    };
    let chain = certificates(cert)?;
    let key = private_key(key)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (ssl.client_auth, &ssl.ca_location) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(TlsError::Config(
                "ssl_client_auth needs ssl_ca_location".into(),
            ))
        }
        (auth, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in certificates(ca)? {
                roots
                    .add(c)
                    .map_err(|e| TlsError::Config(format!("{}: {e}", ca.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    Ok(Arc::new(config))
}

/// What a file looked like when last read: modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: Option<&PathBuf>) -> Stamp {
    let m = std::fs::metadata(path?).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The configurations of SSL listeners (with `ssl_client_auth`) and of SASL_SSL ones
/// (without client certificates).
#[derive(Clone)]
pub struct ListenerConfigs {
    ssl: Arc<ServerConfig>,
    sasl_ssl: Arc<ServerConfig>,
}

/// What a set of PEM files makes: the configurations one kind of endpoint needs.
pub trait Built: Clone + Sized {
    /// Reads `ssl`'s files into the configurations.
    fn build(ssl: &SslConfig) -> Result<Self, TlsError>;
}

impl Built for ListenerConfigs {
    fn build(ssl: &SslConfig) -> Result<Self, TlsError> {
        let without_client_auth = SslConfig {
            client_auth: ClientAuth::None,
            ..ssl.clone()
        };
        Ok(ListenerConfigs {
            ssl: server_config(ssl)?,
            sasl_ssl: server_config(&without_client_auth)?,
        })
    }
}

/// TLS between nodes (`rpc_tls_*`): each end presents its node certificate and accepts
/// only a peer whose certificate chains to the cluster CA.
#[derive(Clone)]
pub struct RpcConfigs {
    /// For the RPC listener: client certificates required.
    pub server: Arc<ServerConfig>,
    /// For connections to peers and seeds: the node certificate presented, the peer's
    /// verified against the cluster CA and the address dialled.
    pub client: Arc<ClientConfig>,
}

impl Built for RpcConfigs {
    fn build(ssl: &SslConfig) -> Result<Self, TlsError> {
        let required = SslConfig {
            client_auth: ClientAuth::Required,
            ..ssl.clone()
        };
        Ok(RpcConfigs {
            server: server_config(&required)?,
            client: client_config(ssl)?,
        })
    }
}

/// The subject of the leaf certificate of `ssl.certificate_location` (RFC 2253, as a
/// peer verifying it sees it).
pub fn leaf_subject(ssl: &SslConfig) -> Result<String, TlsError> {
    let path = ssl.certificate_location.as_ref().ok_or(TlsError::Missing)?;
    let chain = certificates(path)?;
    crate::security::principal::subject_of(&chain[0]).map_err(|e| TlsError::Pem {
        path: path.clone(),
        what: e.to_string(),
    })
}

/// A client configuration trusting `ssl.ca_location` only and presenting
/// `ssl.certificate_location` with its key.
pub fn client_config(ssl: &SslConfig) -> Result<Arc<ClientConfig>, TlsError> {
    let (Some(cert), Some(key), Some(ca)) = (
        &ssl.certificate_location,
        &ssl.key_location,
        &ssl.ca_location,
    ) else {
        return Err(TlsError::Missing);
    };
    let mut roots = RootCertStore::empty();
    for c in certificates(ca)? {
        roots
            .add(c)
            .map_err(|e| TlsError::Config(format!("{}: {e}", ca.display())))?;
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certificates(cert)?, private_key(key)?)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    Ok(Arc::new(config))
}

/// The TLS files as read once at start, before any shard serves: every shard starts from
/// this copy (`Reloading::new`), so none can fail later on files changed in between.
#[derive(Clone)]
pub struct Loaded<T = ListenerConfigs> {
    ssl: SslConfig,
    configs: T,
    stamps: [Stamp; 3],
}

impl<T: Built> Loaded<T> {
    /// Reads `ssl`'s files (an error if they do not make a configuration).
    pub fn load(ssl: &SslConfig) -> Result<Loaded<T>, TlsError> {
        Ok(Loaded {
            ssl: ssl.clone(),
            stamps: stamps(ssl),
            configs: T::build(ssl)?,
        })
    }

    /// The configurations as read.
    pub fn configs(&self) -> &T {
        &self.configs
    }
}

fn stamps(ssl: &SslConfig) -> [Stamp; 3] {
    [
        stamp(ssl.certificate_location.as_ref()),
        stamp(ssl.key_location.as_ref()),
        stamp(ssl.ca_location.as_ref()),
    ]
}

/// A shard's TLS configurations, read again when their files change.
pub struct Reloading<T = ListenerConfigs> {
    ssl: SslConfig,
    current: RefCell<(T, [Stamp; 3])>,
}

impl<T: Built> Reloading<T> {
    /// Starts from the configurations loaded at start.
    pub fn new(loaded: Loaded<T>) -> Reloading<T> {
        Reloading {
            ssl: loaded.ssl,
            current: RefCell::new((loaded.configs, loaded.stamps)),
        }
    }

    /// The configurations in service.
    pub fn current(&self) -> T {
        self.current.borrow().0.clone()
    }

    /// Reads the files again if any changed since last read: `Ok(true)` when a new
    /// configuration is in service; an error leaves the previous one (and is not reported
    /// again until the files change again).
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamps = stamps(&self.ssl);
        if stamps == self.current.borrow().1 {
            return Ok(false);
        }
        let loaded = T::build(&self.ssl);
        let mut current = self.current.borrow_mut();
        current.1 = stamps;
        current.0 = loaded?;
        Ok(true)
    }
}

impl Reloading<ListenerConfigs> {
    /// The configuration new connections of an SSL listener (`sasl` false) or a SASL_SSL
    /// one get.
    pub fn config(&self, sasl: bool) -> Arc<ServerConfig> {
        let current = self.current.borrow();
        if sasl {
            current.0.sasl_ssl.clone()
        } else {
            current.0.ssl.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    //! Over the certificates in `testdata/` (made by `tools/certs.sh` with
    //! STRAND_CERT_DAYS=36500: ca.pem, node.pem/node.key, alice.pem/alice.key, and
    //! foreign-ca.pem, foreign-node.pem/foreign-node.key from a second run).
    use super::*;
    use rustls::{ClientConnection, ServerConnection};

    fn testdata(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/security/testdata")
            .join(name)
    }

    fn ssl(client_auth: ClientAuth) -> SslConfig {
        SslConfig {
            certificate_location: Some(testdata("node.pem")),
            key_location: Some(testdata("node.key")),
            ca_location: Some(testdata("ca.pem")),
            client_auth,
            principal_mapping_rules: "DEFAULT".into(),
        }
    }

    /// A client trusting `ca`, presenting `alice`'s certificate if asked.
    fn client(ca: &str, with_cert: bool) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for c in certificates(&testdata(ca)).expect("ca") {
            roots.add(c).expect("root");
        }
        let b = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        Arc::new(if with_cert {
            b.with_client_auth_cert(
                certificates(&testdata("alice.pem")).expect("chain"),
                private_key(&testdata("alice.key")).expect("key"),
            )
            .expect("client cert")
        } else {
            b.with_no_client_auth()
        })
    }

    /// Runs a handshake in memory: the server's view of the client's certificate chain.
    fn handshake(
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
    ) -> Result<Option<Vec<CertificateDer<'static>>>, String> {
        let name = "localhost".try_into().expect("name");
        let mut c = ClientConnection::new(client, name).expect("client");
        let mut s = ServerConnection::new(server).expect("server");
        for _ in 0..10 {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).expect("client write");
            }
            let mut rd = buf.as_slice();
            while !rd.is_empty() {
                s.read_tls(&mut rd).expect("server read");
            }
            s.process_new_packets().map_err(|e| e.to_string())?;
            let mut buf = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut buf).expect("server write");
            }
            let mut rd = buf.as_slice();
            while !rd.is_empty() {
                c.read_tls(&mut rd).expect("client read");
            }
            c.process_new_packets().map_err(|e| e.to_string())?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(s.peer_certificates().map(<[_]>::to_vec));
            }
        }
        Err("the handshake did not finish".into())
    }

    #[test]
    fn a_client_trusting_the_ca_connects_and_its_certificate_names_it() {
        let server = server_config(&ssl(ClientAuth::Required)).expect("config");
        let chain = handshake(server, client("ca.pem", true))
            .expect("handshake")
            .expect("client chain");
        let subject = crate::security::principal::subject_of(&chain[0]).expect("subject");
        assert_eq!(subject, "CN=alice,OU=clients,O=Strand");
    }

    #[test]
    fn client_certificates_are_required_requested_or_not_asked() {
        let required = server_config(&ssl(ClientAuth::Required)).expect("config");
        assert!(handshake(required, client("ca.pem", false)).is_err());
        let requested = server_config(&ssl(ClientAuth::Requested)).expect("config");
        assert_eq!(
            handshake(requested, client("ca.pem", false)).expect("handshake"),
            None
        );
        let none = server_config(&ssl(ClientAuth::None)).expect("config");
        assert_eq!(
            handshake(none, client("ca.pem", true)).expect("handshake"),
            None
        );
    }

    #[test]
    fn a_certificate_of_a_foreign_ca_is_refused() {
        let mut foreign = ssl(ClientAuth::Required);
        foreign.ca_location = Some(testdata("foreign-ca.pem"));
        let server = server_config(&foreign).expect("config");
        let err = handshake(server, client("ca.pem", true)).expect_err("refused");
        assert!(err.contains("invalid peer certificate"), "{err}");
        // And a client that does not trust the broker's CA refuses the broker.
        let server = server_config(&ssl(ClientAuth::None)).expect("config");
        assert!(handshake(server, client("foreign-ca.pem", false)).is_err());
    }

    #[test]
    fn nodes_of_the_cluster_ca_connect_and_a_node_of_another_ca_is_refused_both_ways() {
        let node = RpcConfigs::build(&ssl(ClientAuth::None)).expect("rpc");
        let chain = handshake(node.server.clone(), node.client.clone())
            .expect("same CA")
            .expect("the node certificate");
        assert!(!chain.is_empty());
        let mut foreign = ssl(ClientAuth::None);
        foreign.certificate_location = Some(testdata("foreign-node.pem"));
        foreign.key_location = Some(testdata("foreign-node.key"));
        let foreign = RpcConfigs::build(&foreign).expect("rpc");
        // Its certificate is refused by a node, and it does not trust a node's (its CA
        // file names the cluster CA, but its own certificate is of another).
        let err = handshake(node.server.clone(), foreign.client.clone()).expect_err("refused");
        assert!(err.contains("invalid peer certificate"), "{err}");
        let mut trusts_foreign_only = ssl(ClientAuth::None);
        trusts_foreign_only.ca_location = Some(testdata("foreign-ca.pem"));
        let other = RpcConfigs::build(&trusts_foreign_only).expect("rpc");
        assert!(handshake(node.server, other.client).is_err());
        // And without a CA file there is no node-to-node configuration.
        let mut no_ca = ssl(ClientAuth::None);
        no_ca.ca_location = None;
        assert!(matches!(
            RpcConfigs::build(&no_ca),
            Err(TlsError::Missing) | Err(TlsError::Config(_))
        ));
    }

    #[test]
    fn files_that_do_not_make_a_configuration_are_named() {
        let mut wrong_key = ssl(ClientAuth::None);
        wrong_key.key_location = Some(testdata("alice.key"));
        assert!(matches!(
            server_config(&wrong_key),
            Err(TlsError::Config(_))
        ));
        let mut missing = ssl(ClientAuth::None);
        missing.certificate_location = Some(testdata("nope.pem"));
        let err = server_config(&missing).expect_err("missing").to_string();
        assert!(err.contains("nope.pem"), "{err}");
        let mut not_a_key = ssl(ClientAuth::None);
        not_a_key.key_location = Some(testdata("ca.pem"));
        assert!(matches!(
            server_config(&not_a_key),
            Err(TlsError::Pem { .. })
        ));
        assert!(matches!(
            server_config(&SslConfig::default()),
            Err(TlsError::Missing)
        ));
    }

    #[test]
    fn changed_files_are_read_again_and_bad_ones_leave_the_old_configuration() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("node.pem");
        let key = dir.path().join("node.key");
        std::fs::copy(testdata("node.pem"), &cert).expect("copy");
        std::fs::copy(testdata("node.key"), &key).expect("copy");
        let mut cfg = ssl(ClientAuth::None);
        cfg.certificate_location = Some(cert.clone());
        cfg.key_location = Some(key.clone());
        let r: Reloading = Reloading::new(Loaded::load(&cfg).expect("load"));
        assert!(!r.reload_if_changed().expect("unchanged"));
        let before = r.config(false);
        // A half-written certificate: reported, the previous configuration stays.
        std::fs::write(&cert, b"-----BEGIN CERTIFICATE-----\n").expect("write");
        assert!(r.reload_if_changed().is_err());
        assert!(Arc::ptr_eq(&before, &r.config(false)));
        assert!(!r.reload_if_changed().expect("reported once"));
        // A complete one (another length than the half-written one): in service.
        let mut extra = std::fs::read(testdata("node.pem")).expect("read");
        extra.push(b'\n');
        std::fs::write(&cert, extra).expect("write");
        assert!(r.reload_if_changed().expect("reloaded"));
        assert!(!Arc::ptr_eq(&before, &r.config(false)));
    }
}
