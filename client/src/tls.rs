//! TLS to a broker whose native listeners serve it (`native_tls`): a rustls client
//! configuration from PEM files, with ring's algorithms as the broker's.
//!
//! Invariant: the broker's certificate is verified against the given CA only (no system
//! roots) and against the name the client dialled (`ClientConfig::tls_server_name`, else
//! the bootstrap host).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

fn tls_error(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{what} {}: {e}", path.display()))
}

/// A TLS configuration trusting the CA certificates of `ca_pem`, presenting the
/// certificate chain and key of `client` when the broker asks for one (`ssl_client_auth`).
#[expect(
    deprecated,
    reason = "ring's provider, as the broker's (see the broker's security::tls)"
)]
pub fn tls_config(
    ca_pem: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_pem).map_err(|e| tls_error("reading", ca_pem, e))? {
        let c = c.map_err(|e| tls_error("reading", ca_pem, e))?;
        roots.add(c).map_err(|e| tls_error("a CA of", ca_pem, e))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Tls(e.to_string()))?
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| tls_error("reading", cert, e))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| tls_error("reading", cert, e))?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| tls_error("reading", key, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Tls(format!("client certificate and key: {e}")))?
        }
    };
    Ok(Arc::new(config))
}
