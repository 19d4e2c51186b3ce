//! JSON Web Tokens for SASL/OAUTHBEARER (issue 23), validated as Kafka's broker-side
//! `OAuthBearerValidatorCallbackHandler` validates them: a JWS in compact form (RFC 7515)
//! signed with one of the keys of a JWK set (RFC 7517) — RS256/384/512, PS256/384/512,
//! ES256, ES384 — never `none` or an HMAC; `exp` and `iat` required, `exp` and `nbf`
//! checked with the configured clock skew; the expected audience and issuer when
//! configured; the subject (`sub`, or the configured claim) is the principal.
//!
//! Invariant: a token is accepted only when its signature verifies with a key of the set
//! whose `kid` (when the token names one) and key type match its algorithm, and every
//! claim check passes; sizes are bounded before anything is decoded (`TOKEN_BYTES_MAX`,
//! `JWKS_BYTES_MAX`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::Value;

/// Longest token accepted (Kafka's clients send tokens of a few KiB).
pub const TOKEN_BYTES_MAX: usize = 16 * 1024;
/// Largest JWK set file read.
pub const JWKS_BYTES_MAX: usize = 1024 * 1024;
/// Most keys of a JWK set used.
const JWKS_KEYS_MAX: usize = 256;

/// Why a token or a key set is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    /// Not a JWS in compact form, or a part that is not base64url JSON.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// An algorithm Kafka's validator does not accept (`none`, HMAC) or one not served.
    #[error("algorithm {0} is not accepted")]
    Algorithm(String),
    /// No key of the set matches the token's `kid` and algorithm.
    #[error("no key of the JWK set matches the token (kid {0:?})")]
    NoKey(Option<String>),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    Signature,
    /// A claim check failed.
    #[error("{0}")]
    Claim(String),
    /// The JWK set is not usable.
    #[error("JWK set: {0}")]
    Jwks(String),
}

/// One verification key of a JWK set.
#[derive(Clone, Debug)]
enum Key {
    /// RSA modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An EC point in uncompressed form (0x04 ‖ x ‖ y) on P-256 or P-384.
    Ec { p384: bool, point: Vec<u8> },
}

#[derive(Clone, Debug)]
struct Jwk {
    kid: Option<String>,
    /// The `alg` the key is restricted to, if any.
    alg: Option<String>,
    key: Key,
}

/// A JWK set: the keys tokens may be signed with.
#[derive(Clone, Debug)]
pub struct Jwks {
    keys: Vec<Jwk>,
}

fn b64(field: &Value, name: &str) -> Result<Vec<u8>, JwtError> {
    let text = field
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| JwtError::Jwks(format!("a key without '{name}'")))?;
    B64URL
        .decode(text.trim_end_matches('='))
        .map_err(|_| JwtError::Jwks(format!("'{name}' is not base64url")))
}

impl Jwks {
    /// Parses a JWK set (`{"keys": [...]}`); keys for encryption (`"use": "enc"`) and of
    /// other types (`oct`, OKP) are skipped; a set with no usable key is an error.
    pub fn parse(json: &[u8]) -> Result<Jwks, JwtError> {
        if json.len() > JWKS_BYTES_MAX {
            return Err(JwtError::Jwks(format!("over {JWKS_BYTES_MAX} bytes")));
        }
        let v: Value =
            serde_json::from_slice(json).map_err(|e| JwtError::Jwks(format!("not JSON: {e}")))?;
        let list = v
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| JwtError::Jwks("no \"keys\" array".into()))?;
        let mut keys = Vec::new();
        for k in list.iter().take(JWKS_KEYS_MAX) {
            if k.get("use").and_then(Value::as_str) == Some("enc") {
                continue;
            }
            let key = match (
                k.get("kty").and_then(Value::as_str),
                k.get("crv").and_then(Value::as_str),
            ) {
                (Some("RSA"), _) => Key::Rsa {
                    n: b64(k, "n")?,
                    e: b64(k, "e")?,
                },
                (Some("EC"), Some(crv @ ("P-256" | "P-384"))) => {
                    let (x, y) = (b64(k, "x")?, b64(k, "y")?);
                    let len = if crv == "P-256" { 32 } else { 48 };
                    if x.len() != len || y.len() != len {
                        return Err(JwtError::Jwks(format!("an {crv} key of the wrong size")));
                    }
                    let mut point = vec![4u8];
                    point.extend_from_slice(&x);
                    point.extend_from_slice(&y);
                    Key::Ec {
                        p384: crv == "P-384",
                        point,
                    }
                }
                _ => continue,
            };
            keys.push(Jwk {
                kid: k.get("kid").and_then(Value::as_str).map(str::to_string),
                alg: k.get("alg").and_then(Value::as_str).map(str::to_string),
                key,
            });
        }
        if keys.is_empty() {
            return Err(JwtError::Jwks(
                "no RSA or EC (P-256, P-384) signing key in it".into(),
            ));
        }
        Ok(Jwks { keys })
    }

    /// Verifies `signature` over `message` with the keys matching `kid` and `alg`.
    fn verify(
        &self,
        kid: Option<&str>,
        alg: &str,
        message: &[u8],
        sig: &[u8],
    ) -> Result<(), JwtError> {
        let rsa: Option<&'static signature::RsaParameters> = match alg {
            "RS256" => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
            "RS384" => Some(&signature::RSA_PKCS1_2048_8192_SHA384),
            "RS512" => Some(&signature::RSA_PKCS1_2048_8192_SHA512),
            "PS256" => Some(&signature::RSA_PSS_2048_8192_SHA256),
            "PS384" => Some(&signature::RSA_PSS_2048_8192_SHA384),
            "PS512" => Some(&signature::RSA_PSS_2048_8192_SHA512),
            _ => None,
        };
        let ec: Option<(bool, &'static signature::EcdsaVerificationAlgorithm)> = match alg {
            "ES256" => Some((false, &signature::ECDSA_P256_SHA256_FIXED)),
            "ES384" => Some((true, &signature::ECDSA_P384_SHA384_FIXED)),
            _ => None,
        };
        if rsa.is_none() && ec.is_none() {
            return Err(JwtError::Algorithm(alg.to_string()));
        }
        let candidates = self.keys.iter().filter(|k| {
            kid.is_none_or(|kid| k.kid.as_deref() == Some(kid))
                && k.alg.as_deref().is_none_or(|a| a == alg)
        });
        let mut matched = false;
        for k in candidates {
            let ok = match (&k.key, rsa, ec) {
                (Key::Rsa { n, e }, Some(params), _) => {
                    matched = true;
                    RsaPublicKeyComponents { n, e }
                        .verify(params, message, sig)
                        .is_ok()
                }
                (Key::Ec { p384, point }, _, Some((want_p384, params))) if *p384 == want_p384 => {
                    matched = true;
                    UnparsedPublicKey::new(params, point)
                        .verify(message, sig)
                        .is_ok()
                }
                _ => false,
            };
            if ok {
                return Ok(());
            }
        }
        if matched {
            Err(JwtError::Signature)
        } else {
            Err(JwtError::NoKey(kid.map(str::to_string)))
        }
    }
}

/// The claim checks (Kafka's `sasl.oauthbearer.*` broker settings).
pub use crate::common::config::OAuthBearerConfig as ClaimRules;

/// What a valid token says.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated {
    /// The principal's name (the subject claim).
    pub principal: String,
    /// When the token expires, in milliseconds since the epoch.
    pub expires_at_ms: i64,
    /// The scopes it grants.
    pub scope: Vec<String>,
}

fn part(text: &str) -> Result<Value, JwtError> {
    let bytes = B64URL
        .decode(text)
        .map_err(|_| JwtError::Malformed("a part is not base64url"))?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed("a part is not JSON"))
}

/// A NumericDate claim (seconds since the epoch, possibly fractional) in milliseconds.
fn date_ms(claims: &Value, name: &str) -> Result<Option<i64>, JwtError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite() && s.abs() < 1e12)
            .map(|s| Some((s * 1000.0) as i64))
            .ok_or_else(|| JwtError::Claim(format!("'{name}' is not a NumericDate"))),
    }
}

/// Strings of a claim that is a string or an array of strings (`aud`; `scope` split at
/// spaces).
fn strings(claims: &Value, name: &str, split: bool) -> Vec<String> {
    match claims.get(name) {
        Some(Value::String(s)) if split => s.split_whitespace().map(str::to_string).collect(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Validates `token` against `jwks` and `rules` at `now_ms` (see the module doc).
pub fn validate(
    token: &str,
    jwks: &Jwks,
    rules: &ClaimRules,
    now_ms: i64,
) -> Result<Validated, JwtError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(JwtError::Malformed("longer than the limit"));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed("not three dot-separated parts (a JWS)"));
    };
    let header = part(h)?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or(JwtError::Malformed("no 'alg' in the header"))?;
    if header.get("crit").is_some() {
        return Err(JwtError::Malformed(
            "critical header parameters are not understood",
        ));
    }
    let sig = B64URL
        .decode(s)
        .map_err(|_| JwtError::Malformed("the signature is not base64url"))?;
    let kid = header.get("kid").and_then(Value::as_str);
    let signed = &token[..h.len() + 1 + p.len()];
    jwks.verify(kid, alg, signed.as_bytes(), &sig)?;
    let claims = part(p)?;
    check_claims(&claims, rules, now_ms)
}

fn check_claims(claims: &Value, rules: &ClaimRules, now_ms: i64) -> Result<Validated, JwtError> {
    let skew_ms = i64::try_from(rules.clock_skew_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    let exp = date_ms(claims, "exp")?.ok_or_else(|| JwtError::Claim("no 'exp' claim".into()))?;
    if now_ms.saturating_sub(skew_ms) >= exp {
        return Err(JwtError::Claim("the token has expired".into()));
    }
    if date_ms(claims, "iat")?.is_none() {
        return Err(JwtError::Claim("no 'iat' claim".into()));
    }
    if date_ms(claims, "nbf")?.is_some_and(|nbf| now_ms.saturating_add(skew_ms) < nbf) {
        return Err(JwtError::Claim("the token is not valid yet ('nbf')".into()));
    }
    if !rules.expected_audience.is_empty() {
        let aud = strings(claims, "aud", false);
        if !aud.iter().any(|a| rules.expected_audience.contains(a)) {
            return Err(JwtError::Claim(format!(
                "audience {aud:?} is none of the expected {:?}",
                rules.expected_audience
            )));
        }
    }
    if let Some(iss) = &rules.expected_issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(iss.as_str()) {
            return Err(JwtError::Claim(format!("the issuer is not {iss}")));
        }
    }
    let principal = claims
        .get(&rules.sub_claim_name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            JwtError::Claim(format!(
                "no '{}' claim (the principal)",
                rules.sub_claim_name
            ))
        })?;
    Ok(Validated {
        principal: principal.to_string(),
        expires_at_ms: exp,
        scope: strings(claims, &rules.scope_claim_name, true),
    })
}

/// How often a JWK set file is looked at for a change.
pub const JWKS_RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

type Stamp = Option<(std::time::SystemTime, u64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// A JWK set file, read again when it changes (looked at no more than once per
/// `JWKS_RELOAD_CHECK`): an identity provider rotates its keys by publishing the new one
/// beside the old. A file that does not parse leaves the previous set in service.
pub struct JwksFile {
    path: std::path::PathBuf,
    jwks: Jwks,
    stamp: Stamp,
    checked: std::time::Instant,
}

impl JwksFile {
    /// Reads and parses `path`.
    pub fn load(path: &std::path::Path, now: std::time::Instant) -> Result<JwksFile, JwtError> {
        let stamp = stamp(path);
        let bytes = std::fs::read(path)
            .map_err(|e| JwtError::Jwks(format!("cannot read {}: {e}", path.display())))?;
        Ok(JwksFile {
            path: path.to_path_buf(),
            jwks: Jwks::parse(&bytes)
                .map_err(|e| JwtError::Jwks(format!("{}: {e}", path.display())))?,
            stamp,
            checked: now,
        })
    }

    /// The set in service, read again first if the file changed (a change that does not
    /// parse is warned about once and the previous set kept).
    pub fn current(&mut self, now: std::time::Instant) -> &Jwks {
        if now.saturating_duration_since(self.checked) >= JWKS_RELOAD_CHECK {
            self.checked = now;
            let stamp = stamp(&self.path);
            if stamp != self.stamp {
                self.stamp = stamp;
                match JwksFile::load(&self.path, now) {
                    Ok(f) => {
                        tracing::info!(path = %self.path.display(), "JWK set file changed: in service");
                        self.jwks = f.jwks;
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "JWK set file changed but does not load: still using the previous keys"
                    ),
                }
            }
        }
        &self.jwks
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Tokens signed here with ring: an RSA key from `testdata/jwt-rsa.key` (made by
    //! `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048`) and EC keys made
    //! per test.
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair};
    use rustls::pki_types::pem::PemObject;
    use serde_json::json;

    pub(crate) fn rsa_key() -> RsaKeyPair {
        let pem = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/security/testdata/jwt-rsa.key"),
        )
        .expect("key");
        let der = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(&pem).expect("pkcs8");
        RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).expect("rsa")
    }

    /// The JWK set of `key` under `kid`.
    pub(crate) fn rsa_jwks(key: &RsaKeyPair, kid: &str) -> Jwks {
        let c: RsaPublicKeyComponents<Vec<u8>> = key.public().into();
        let text = json!({"keys": [{"kty": "RSA", "kid": kid, "use": "sig",
            "n": B64URL.encode(&c.n), "e": B64URL.encode(&c.e)}]});
        Jwks::parse(text.to_string().as_bytes()).expect("jwks")
    }

    /// A token of `claims` signed RS256 by `key`, naming `kid`.
    pub(crate) fn rs256(key: &RsaKeyPair, kid: &str, claims: &Value) -> String {
        let header = json!({"alg": "RS256", "typ": "JWT", "kid": kid});
        let signed = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(claims.to_string())
        );
        let mut sig = vec![0; key.public().modulus_len()];
        key.sign(
            &signature::RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            signed.as_bytes(),
            &mut sig,
        )
        .expect("sign");
        format!("{signed}.{}", B64URL.encode(sig))
    }

    pub(crate) fn rules() -> ClaimRules {
        ClaimRules::new(std::path::PathBuf::new())
    }

    const NOW_MS: i64 = 1_800_000_000_000;

    fn claims(sub: &str, exp_s: i64) -> Value {
        json!({"sub": sub, "iat": NOW_MS / 1000 - 10, "exp": exp_s, "scope": "read write",
               "aud": ["kafka", "other"], "iss": "https://idp.example"})
    }

    #[test]
    fn a_token_signed_by_a_key_of_the_set_names_its_subject() {
        let key = rsa_key();
        let jwks = rsa_jwks(&key, "k1");
        let token = rs256(&key, "k1", &claims("svc-orders", NOW_MS / 1000 + 600));
        let v = validate(&token, &jwks, &rules(), NOW_MS).expect("valid");
        assert_eq!(v.principal, "svc-orders");
        assert_eq!(v.expires_at_ms, NOW_MS + 600_000);
        assert_eq!(v.scope, vec!["read", "write"]);
    }

    #[test]
    fn tampered_foreign_unsigned_and_unknown_kid_tokens_are_refused() {
        let key = rsa_key();
        let jwks = rsa_jwks(&key, "k1");
        let token = rs256(&key, "k1", &claims("svc", NOW_MS / 1000 + 600));
        // Another payload under the same signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = B64URL.encode(claims("admin", NOW_MS / 1000 + 600).to_string());
        parts[1] = &forged;
        assert_eq!(
            validate(&parts.join("."), &jwks, &rules(), NOW_MS),
            Err(JwtError::Signature)
        );
        // A key the set does not hold (an EC key under the same kid).
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("gen");
        let ec = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .expect("ec");
        let header = B64URL.encode(json!({"alg": "ES256", "kid": "k1"}).to_string());
        let body = B64URL.encode(claims("svc", NOW_MS / 1000 + 600).to_string());
        let signed = format!("{header}.{body}");
        let sig = ec.sign(&rng, signed.as_bytes()).expect("sign");
        let es = format!("{signed}.{}", B64URL.encode(sig.as_ref()));
        assert_eq!(
            validate(&es, &jwks, &rules(), NOW_MS),
            Err(JwtError::NoKey(Some("k1".into())))
        );
        // ... which verifies once its public key is in the set.
        let (x, y) = ec.public_key().as_ref()[1..].split_at(32);
        let set = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
            "x": B64URL.encode(x), "y": B64URL.encode(y)}]});
        let ec_set = Jwks::parse(set.to_string().as_bytes()).expect("jwks");
        assert!(validate(&es, &ec_set, &rules(), NOW_MS).is_ok());
        // alg none and HMAC are never accepted.
        for alg in ["none", "HS256"] {
            let header = B64URL.encode(json!({"alg": alg}).to_string());
            let t = format!("{header}.{body}.");
            assert_eq!(
                validate(&t, &jwks, &rules(), NOW_MS),
                Err(JwtError::Algorithm(alg.into()))
            );
        }
        let other_kid = rs256(&key, "k2", &claims("svc", NOW_MS / 1000 + 600));
        assert!(matches!(
            validate(&other_kid, &jwks, &rules(), NOW_MS),
            Err(JwtError::NoKey(_))
        ));
        for bad in ["", "a.b", "a.b.c.d", "!!.!!.!!"] {
            assert!(matches!(
                validate(bad, &jwks, &rules(), NOW_MS),
                Err(JwtError::Malformed(_))
            ));
        }
    }

    #[test]
    fn claims_are_checked_as_kafka_checks_them() {
        let key = rsa_key();
        let jwks = rsa_jwks(&key, "k1");
        let check = |c: Value, r: &ClaimRules| validate(&rs256(&key, "k1", &c), &jwks, r, NOW_MS);
        // Expired, within the skew, and beyond it.
        assert!(check(claims("s", NOW_MS / 1000 - 10), &rules()).is_ok());
        assert!(matches!(
            check(claims("s", NOW_MS / 1000 - 31), &rules()),
            Err(JwtError::Claim(_))
        ));
        let mut no_iat = claims("s", NOW_MS / 1000 + 60);
        no_iat.as_object_mut().expect("object").remove("iat");
        assert!(check(no_iat, &rules()).is_err());
        let mut no_exp = claims("s", 0);
        no_exp.as_object_mut().expect("object").remove("exp");
        assert!(check(no_exp, &rules()).is_err());
        let mut early = claims("s", NOW_MS / 1000 + 600);
        early["nbf"] = json!(NOW_MS / 1000 + 100);
        assert!(check(early, &rules()).is_err());
        assert!(check(claims(" ", NOW_MS / 1000 + 60), &rules()).is_err());
        let mut r = rules();
        r.expected_audience = vec!["kafka".into()];
        r.expected_issuer = Some("https://idp.example".into());
        assert!(check(claims("s", NOW_MS / 1000 + 60), &r).is_ok());
        r.expected_audience = vec!["billing".into()];
        assert!(check(claims("s", NOW_MS / 1000 + 60), &r).is_err());
        r.expected_audience.clear();
        r.expected_issuer = Some("https://other".into());
        assert!(check(claims("s", NOW_MS / 1000 + 60), &r).is_err());
        let mut r = rules();
        r.sub_claim_name = "client_id".into();
        let mut c = claims("s", NOW_MS / 1000 + 60);
        c["client_id"] = json!("app-7");
        assert_eq!(check(c, &r).expect("valid").principal, "app-7");
    }

    #[test]
    fn key_sets_without_usable_keys_are_refused() {
        for bad in [
            "",
            "{}",
            r#"{"keys": []}"#,
            r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
            r#"{"keys": [{"kty": "RSA", "n": "AQAB"}]}"#,
            r#"{"keys": [{"kty": "EC", "crv": "P-256", "x": "AQAB", "y": "AQAB"}]}"#,
        ] {
            assert!(Jwks::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
