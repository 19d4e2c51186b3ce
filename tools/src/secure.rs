//! `--command-config FILE`: the client security settings of Kafka's tools and librdkafka
//! (`security.protocol`, `sasl.mechanism`, `sasl.username`/`sasl.password` or a Java
//! `sasl.jaas.config`, `ssl.ca.location`/`ssl.truststore.location`,
//! `ssl.certificate.location`+`ssl.key.location` or a PEM `ssl.keystore.location`), read
//! once; every connection of the command then uses them: TLS (rustls) for SSL and
//! SASL_SSL, then SASL PLAIN or SCRAM-SHA-256/512 (RFC 5802, the server's signature
//! checked) for the SASL protocols.
//!
//! Invariant: a password is never printed; a server whose SCRAM signature does not verify
//! fails the command.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{bail, Context};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// The settings every connection of this process uses (`set` once, from main).
static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// SASL credentials.
#[derive(Clone)]
pub struct Sasl {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    /// The user.
    pub username: String,
    /// The password (never printed).
    pub password: String,
}

/// A command's client security.
#[derive(Clone, Default)]
pub struct Settings {
    /// TLS, when the protocol is SSL or SASL_SSL.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL, when the protocol is SASL_PLAINTEXT or SASL_SSL.
    pub sasl: Option<Sasl>,
}

/// The settings in effect (none unless `--command-config` gave some).
pub fn settings() -> Settings {
    SETTINGS.get().cloned().unwrap_or_default()
}

/// Reads `path` and makes its settings every later connection's.
pub fn load(path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --command-config {}", path.display()))?;
    let s = parse(&text).with_context(|| format!("--command-config {}", path.display()))?;
    let _ = SETTINGS.set(s);
    Ok(())
}

/// `key=value` lines (`#` and `!` comments, as Java properties).
fn properties(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The value of `name="value"` in a JAAS line.
fn jaas_value(jaas: &str, name: &str) -> Option<String> {
    let start = jaas.find(&format!("{name}=\""))? + name.len() + 2;
    let end = jaas[start..].find('"')? + start;
    Some(jaas[start..end].to_string())
}

fn parse(text: &str) -> anyhow::Result<Settings> {
    let p = properties(text);
    let get = |k: &str| p.get(k).cloned();
    let protocol = get("security.protocol").unwrap_or_else(|| "PLAINTEXT".into());
    let (tls, sasl) = match protocol.to_ascii_uppercase().as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => bail!("security.protocol {other}: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    };
    let mut out = Settings::default();
    if sasl {
        let jaas = get("sasl.jaas.config").unwrap_or_default();
        let username = get("sasl.username").or_else(|| jaas_value(&jaas, "username"));
        let password = get("sasl.password").or_else(|| jaas_value(&jaas, "password"));
        let (Some(username), Some(password)) = (username, password) else {
            bail!("SASL needs sasl.username and sasl.password (or sasl.jaas.config)");
        };
        let mechanism = get("sasl.mechanism").unwrap_or_else(|| "PLAIN".into());
        if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&mechanism.as_str()) {
            bail!("sasl.mechanism {mechanism}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
        }
        out.sasl = Some(Sasl {
            mechanism,
            username,
            password,
        });
    }
    if tls {
        out.tls = Some(Arc::new(tls_config(&p)?));
    }
    Ok(out)
}

#[expect(
    deprecated,
    reason = "ring's provider, as the broker's (see security::tls)"
)]
fn tls_config(
    p: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let ca = p
        .get("ssl.ca.location")
        .or_else(|| p.get("ssl.truststore.location"))
        .context("TLS needs ssl.ca.location (or a PEM ssl.truststore.location)")?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {ca}"))? {
        roots.add(c.with_context(|| format!("a certificate of {ca}"))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let cert = p
        .get("ssl.certificate.location")
        .or_else(|| p.get("ssl.keystore.location"));
    let key = p
        .get("ssl.key.location")
        .or_else(|| p.get("ssl.keystore.location"));
    Ok(match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("reading {cert}"))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("a certificate of {cert}"))?;
            let key =
                PrivateKeyDer::from_pem_file(key).with_context(|| format!("the key in {key}"))?;
            builder.with_client_auth_cert(chain, key)?
        }
        _ => builder.with_no_client_auth(),
    })
}

/// A connection: plain TCP or TLS over it.
pub enum Stream {
    /// TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// `tcp` wrapped in TLS for the broker at `addr` (its host names the certificate) when
/// the settings ask for it.
pub fn wrap(tcp: TcpStream, addr: &str, settings: &Settings) -> std::io::Result<Stream> {
    let Some(config) = &settings.tls else {
        return Ok(Stream::Plain(tcp));
    };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = rustls::pki_types::ServerName::try_from(host)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let conn = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    Ok(Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
}

/// The SCRAM client of RFC 5802: `step` answers each server message.
pub struct ScramClient {
    sha512: bool,
    username: String,
    password: String,
    nonce: String,
    client_first_bare: String,
    /// (ServerKey-derived expected signature), once the final message was sent.
    expected_signature: Option<Vec<u8>>,
}

fn hmac(sha512: bool, key: &[u8], data: &[u8]) -> Vec<u8> {
    if sha512 {
        let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(data);
        m.finalize().into_bytes().to_vec()
    } else {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(data);
        m.finalize().into_bytes().to_vec()
    }
}

impl ScramClient {
    /// A client of `mechanism` (SCRAM-SHA-256 or SCRAM-SHA-512) with a random nonce.
    pub fn new(mechanism: &str, username: &str, password: &str) -> ScramClient {
        let mut raw = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut raw);
        let nonce = base64::engine::general_purpose::STANDARD.encode(raw);
        Self::with_nonce(mechanism, username, password, nonce)
    }

    fn with_nonce(mechanism: &str, username: &str, password: &str, nonce: String) -> ScramClient {
        let name = username.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            sha512: mechanism == "SCRAM-SHA-512",
            username: username.to_string(),
            password: password.to_string(),
            client_first_bare: format!("n={name},r={nonce}"),
            nonce,
            expected_signature: None,
        }
    }

    /// The first message.
    pub fn first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The final message, from the server's first.
    pub fn answer(&mut self, server_first: &[u8]) -> anyhow::Result<Vec<u8>> {
        let text = std::str::from_utf8(server_first).context("server-first is not UTF-8")?;
        let field = |k: &str| {
            text.split(',')
                .find_map(|f| f.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        };
        let nonce = field("r").context("server-first has no nonce")?;
        if !nonce.starts_with(&self.nonce) {
            bail!("the server's nonce does not extend ours");
        }
        let salt = base64::engine::general_purpose::STANDARD
            .decode(field("s").context("server-first has no salt")?)
            .context("the salt is not base64")?;
        let iterations: u32 = field("i")
            .context("server-first has no iteration count")?
            .parse()
            .context("the iteration count is not a number")?;
        let mut salted = vec![0u8; if self.sha512 { 64 } else { 32 }];
        if self.sha512 {
            pbkdf2::pbkdf2_hmac::<Sha512>(self.password.as_bytes(), &salt, iterations, &mut salted);
        } else {
            pbkdf2::pbkdf2_hmac::<Sha256>(self.password.as_bytes(), &salt, iterations, &mut salted);
        }
        let client_key = hmac(self.sha512, &salted, b"Client Key");
        let stored_key = if self.sha512 {
            Sha512::digest(&client_key).to_vec()
        } else {
            Sha256::digest(&client_key).to_vec()
        };
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = hmac(self.sha512, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(self.sha512, &salted, b"Server Key");
        self.expected_signature = Some(hmac(self.sha512, &server_key, auth_message.as_bytes()));
        let proof = base64::engine::general_purpose::STANDARD.encode(proof);
        Ok(format!("{without_proof},p={proof}").into_bytes())
    }

    /// Checks the server's final message (its signature proves it knew our credential).
    pub fn verify(&self, server_final: &[u8]) -> anyhow::Result<()> {
        let text = std::str::from_utf8(server_final).context("server-final is not UTF-8")?;
        if let Some(e) = text.strip_prefix("e=") {
            bail!("SCRAM authentication of {} failed: {e}", self.username);
        }
        let v = text
            .strip_prefix("v=")
            .context("server-final has no signature")?;
        let got = base64::engine::general_purpose::STANDARD
            .decode(v)
            .context("the server signature is not base64")?;
        if Some(got) != self.expected_signature {
            bail!("the server's SCRAM signature does not verify: not the broker we trust");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, byte for byte.
    #[test]
    fn scram_sha_256_is_rfc_7677s() {
        let mut c = ScramClient::with_nonce(
            "SCRAM-SHA-256",
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".to_string(),
        );
        assert_eq!(c.first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO".to_vec());
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = c.answer(server_first).expect("answer");
        assert_eq!(
            String::from_utf8(last).expect("utf8"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .expect("server signature");
        assert!(c.verify(b"v=AAAA").is_err());
        assert!(c.verify(b"e=invalid-proof").is_err());
    }

    #[test]
    fn settings_read_as_kafkas_tools_and_librdkafka_write_them() {
        let s = parse(
            "# comment\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"pw\";\n",
        )
        .expect("parse");
        let sasl = s.sasl.expect("sasl");
        assert_eq!(
            (
                sasl.mechanism.as_str(),
                sasl.username.as_str(),
                sasl.password.as_str()
            ),
            ("SCRAM-SHA-512", "alice", "pw")
        );
        assert!(s.tls.is_none());
        assert!(
            parse("security.protocol=SASL_SSL\nsasl.username=a\nsasl.password=b\n").is_err(),
            "no CA"
        );
        assert!(parse("security.protocol=TLS\n").is_err());
        assert!(
            parse("security.protocol=SASL_PLAINTEXT\n").is_err(),
            "no credentials"
        );
        assert!(parse("").expect("plaintext").sasl.is_none());
    }
}
