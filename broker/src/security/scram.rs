//! SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677), the server side, as Kafka's
//! `ScramSaslServer` serves it: a credential is (salt, iterations, StoredKey, ServerKey),
//! never the password; an exchange is client-first → server-first → client-final →
//! server-final.
//!
//! Invariant: a client proof is accepted only when H(ClientSignature XOR proof) equals the
//! StoredKey (compared in time independent of where they differ), the nonce is the one
//! this server extended, and the channel binding is the GS2 header the client sent first
//! ("n,," or "y,,": no channel binding is offered).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Fewest iterations a credential may have (Kafka's minimum, RFC 7677's recommendation).
pub const ITERATIONS_MIN: u32 = 4096;
/// Most iterations a credential may have (Kafka's maximum).
pub const ITERATIONS_MAX: u32 = 16384;
/// Longest SCRAM message read from a client.
pub const SCRAM_MESSAGE_BYTES_MAX: usize = 4096;

/// A SCRAM mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl Mechanism {
    /// Every mechanism, strongest first.
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha512, Mechanism::Sha256];

    /// The SASL name.
    pub const fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL name.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mechanism of Kafka's `ScramMechanism` type code.
    pub fn from_kafka_type(kafka_type: i8) -> Option<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.kafka_type() == kafka_type)
    }

    /// Kafka's `ScramMechanism` type code (DescribeUserScramCredentials).
    pub const fn kafka_type(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts a key of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha512 => {
                let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts a key of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// SaltedPassword := Hi(password, salt, iterations) (PBKDF2 with this HMAC).
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }
}

/// A user's SCRAM credential for one mechanism (what is stored; the password is not).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// Hi's iteration count.
    pub iterations: u32,
    /// H(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// The credential of `password` with `salt` and `iterations` (the caller checked
    /// them against ITERATIONS_MIN/MAX).
    pub fn new(mechanism: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Self {
        let salted = mechanism.salted_password(password, salt, iterations);
        Credential::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// The credential of an already salted password (AlterUserScramCredentials sends
    /// that, never the password).
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Self {
        let client_key = mechanism.hmac(salted, b"Client Key");
        Credential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted, b"Server Key"),
        }
    }

    /// Whether `password` is the one this credential was made from (SASL/PLAIN).
    pub fn matches_password(&self, password: &[u8]) -> bool {
        let again = Credential::new(self.mechanism, password, &self.salt, self.iterations);
        same(&again.stored_key, &self.stored_key)
    }
}

/// Why a SCRAM exchange failed. The client sees only "invalid credentials" for the
/// credential cases.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message that is not what this step expects.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// Unknown user or wrong proof.
    #[error("invalid credentials")]
    InvalidCredentials,
    /// Channel binding, an authorization id other than the user, or extensions asked for.
    #[error("unsupported SCRAM feature: {0}")]
    Unsupported(&'static str),
    /// A message after the exchange ended.
    #[error("the SCRAM exchange is over")]
    Over,
}

/// What the server answers a client message with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes, expect the next client message.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send these bytes (server-final) and stop.
    Done {
        /// The server-final message.
        response: Vec<u8>,
        /// Who authenticated.
        user: String,
    },
}

#[derive(Clone, Debug)]
enum State {
    First,
    Final {
        user: String,
        credential: Credential,
        gs2_header: String,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Over,
}

/// One SCRAM exchange on a connection, server side.
#[derive(Clone, Debug)]
pub struct ServerExchange {
    mechanism: Mechanism,
    server_nonce: String,
    state: State,
}

impl ServerExchange {
    /// A new exchange; `server_nonce` is printable random text (no ','), added to the
    /// client's nonce.
    pub fn new(mechanism: Mechanism, server_nonce: String) -> Self {
        ServerExchange {
            mechanism,
            server_nonce,
            state: State::First,
        }
    }

    /// The exchange's mechanism.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Takes the client's next message; `lookup` finds a user's credential for this
    /// exchange's mechanism.
    pub fn step(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<Step, ScramError> {
        if message.len() > SCRAM_MESSAGE_BYTES_MAX {
            self.state = State::Over;
            return Err(ScramError::Malformed("too long"));
        }
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        match std::mem::replace(&mut self.state, State::Over) {
            State::First => self.client_first(text, lookup),
            State::Final {
                user,
                credential,
                gs2_header,
                client_first_bare,
                server_first,
                nonce,
            } => {
                let proof = ClientFinal::parse(text, &gs2_header, &nonce)?;
                let auth_message =
                    format!("{client_first_bare},{server_first},{}", proof.without_proof);
                let m = self.mechanism;
                let client_signature = m.hmac(&credential.stored_key, auth_message.as_bytes());
                if proof.proof.len() != client_signature.len() {
                    return Err(ScramError::InvalidCredentials);
                }
                let client_key: Vec<u8> = client_signature
                    .iter()
                    .zip(&proof.proof)
                    .map(|(a, b)| a ^ b)
                    .collect();
                if !same(&m.hash(&client_key), &credential.stored_key) {
                    return Err(ScramError::InvalidCredentials);
                }
                let server_signature = m.hmac(&credential.server_key, auth_message.as_bytes());
                Ok(Step::Done {
                    response: format!("v={}", B64.encode(server_signature)).into_bytes(),
                    user,
                })
            }
            State::Over => Err(ScramError::Over),
        }
    }

    fn client_first(
        &mut self,
        text: &str,
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<Step, ScramError> {
        // gs2-header = cbind-flag "," [authzid] ","
        let mut parts = text.splitn(3, ',');
        let (Some(cbind), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(ScramError::Malformed("client-first needs a GS2 header"));
        };
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => return Err(ScramError::Unsupported("channel binding")),
            _ => return Err(ScramError::Malformed("bad channel binding flag")),
        }
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=') {
                Some(("n", v)) => user = Some(decode_saslname(v)?),
                Some(("r", v)) => client_nonce = Some(v.to_string()),
                Some(("m", _)) => return Err(ScramError::Unsupported("mandatory extension")),
                // Kafka's token extensions ("tokenauth=true") and other extensions.
                Some((_, _)) => {}
                None => return Err(ScramError::Malformed("attribute without '='")),
            }
        }
        let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
            return Err(ScramError::Malformed("client-first needs n= and r="));
        };
        if client_nonce.is_empty()
            || !client_nonce
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
        {
            return Err(ScramError::Malformed("bad client nonce"));
        }
        if let Some(authz) = authzid.strip_prefix("a=") {
            if decode_saslname(authz)? != user {
                return Err(ScramError::Unsupported(
                    "an authorization id other than the user",
                ));
            }
        } else if !authzid.is_empty() {
            return Err(ScramError::Malformed("bad authorization id"));
        }
        let Some(credential) = lookup(&user).filter(|c| c.mechanism == self.mechanism) else {
            return Err(ScramError::InvalidCredentials);
        };
        let nonce = format!("{client_nonce}{}", self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let response = server_first.clone().into_bytes();
        self.state = State::Final {
            user,
            credential,
            gs2_header: format!("{cbind},{authzid},"),
            client_first_bare: bare.to_string(),
            server_first,
            nonce,
        };
        Ok(Step::Continue(response))
    }
}

/// A parsed client-final message.
struct ClientFinal {
    /// "c=...,r=..." (the part the AuthMessage holds).
    without_proof: String,
    proof: Vec<u8>,
}

impl ClientFinal {
    fn parse(text: &str, gs2_header: &str, nonce: &str) -> Result<ClientFinal, ScramError> {
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("client-final needs p="))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed("client-final starts with c="))?;
        let given_nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("client-final needs r= second"))?;
        if B64.decode(binding).ok().as_deref() != Some(gs2_header.as_bytes()) {
            return Err(ScramError::Malformed(
                "channel binding differs from the GS2 header",
            ));
        }
        if given_nonce != nonce {
            return Err(ScramError::Malformed("nonce differs from the server's"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        Ok(ClientFinal {
            without_proof: without_proof.to_string(),
            proof,
        })
    }
}

/// A saslname with "=2C" and "=3D" decoded (RFC 5802 5.1); any other '=' is refused.
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad '=' escape in a name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(ScramError::Malformed("empty user name"));
    }
    Ok(out)
}

/// Compares without returning early at the first difference.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil".
    const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn pencil() -> Credential {
        let salt = B64.decode(SALT_B64).expect("salt");
        Credential::new(Mechanism::Sha256, b"pencil", &salt, 4096)
    }

    fn exchange() -> ServerExchange {
        ServerExchange::new(Mechanism::Sha256, SERVER_NONCE.to_string())
    }

    #[test]
    fn rfc_7677_exchange() {
        let mut x = exchange();
        let lookup = |u: &str| (u == "user").then(pencil);
        assert_eq!(
            x.step(CLIENT_FIRST.as_bytes(), lookup),
            Ok(Step::Continue(SERVER_FIRST.as_bytes().to_vec()))
        );
        assert_eq!(
            x.step(CLIENT_FINAL.as_bytes(), |_| None),
            Ok(Step::Done {
                response: SERVER_FINAL.as_bytes().to_vec(),
                user: "user".into()
            })
        );
        assert_eq!(x.step(b"again", |_| None), Err(ScramError::Over));
    }

    #[test]
    fn a_wrong_password_an_unknown_user_and_a_changed_nonce_fail() {
        let salt = B64.decode(SALT_B64).expect("salt");
        let wrong = Credential::new(Mechanism::Sha256, b"pencil2", &salt, 4096);
        let mut x = exchange();
        x.step(CLIENT_FIRST.as_bytes(), |_| Some(wrong))
            .expect("first");
        assert_eq!(
            x.step(CLIENT_FINAL.as_bytes(), |_| None),
            Err(ScramError::InvalidCredentials)
        );
        assert_eq!(
            exchange().step(CLIENT_FIRST.as_bytes(), |_| None),
            Err(ScramError::InvalidCredentials),
            "an unknown user fails like a wrong password"
        );
        let sha512 = Credential::new(Mechanism::Sha512, b"pencil", b"salt", 4096);
        assert_eq!(
            exchange().step(CLIENT_FIRST.as_bytes(), |_| Some(sha512)),
            Err(ScramError::InvalidCredentials),
            "a credential of the other mechanism does not count"
        );
        let mut x = exchange();
        x.step(CLIENT_FIRST.as_bytes(), |_| Some(pencil()))
            .expect("first");
        let other_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert!(matches!(
            x.step(other_nonce.as_bytes(), |_| None),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn bad_client_first_messages_are_refused() {
        for bad in [
            "",
            "n,,",
            "n,,n=user",
            "n,,r=abc",
            "x,,n=user,r=abc",
            "p=tls-unique,,n=user,r=abc",
            "n,,n=us=er,r=abc",
            "n,,n=user,r=a,b",
            "n,a=other,n=user,r=abc",
            "n,,n=user,r=abc,m=ext",
            "n,,n=,r=abc",
        ] {
            let r = exchange().step(bad.as_bytes(), |_| Some(pencil()));
            assert!(r.is_err(), "{bad:?} gave {r:?}");
        }
        let long = vec![b'a'; SCRAM_MESSAGE_BYTES_MAX + 1];
        assert!(exchange().step(&long, |_| Some(pencil())).is_err());
        assert!(exchange().step(&[0xff, 0xfe], |_| Some(pencil())).is_err());
        // An escaped name and Kafka's token extension are fine.
        let mut x = exchange();
        let mut seen = String::new();
        x.step(b"n,,n=a=2Cb=3Dc,r=abc,tokenauth=true", |u| {
            seen = u.to_string();
            Some(pencil())
        })
        .expect("escaped name");
        assert_eq!(seen, "a,b=c");
    }

    #[test]
    fn plain_passwords_are_checked_against_the_credential() {
        assert!(pencil().matches_password(b"pencil"));
        assert!(!pencil().matches_password(b"pencil "));
        let c = Credential::new(Mechanism::Sha512, b"s3cret", b"NaCl", ITERATIONS_MIN);
        assert_eq!((c.stored_key.len(), c.server_key.len()), (64, 64));
        assert!(c.matches_password(b"s3cret"));
    }
}
