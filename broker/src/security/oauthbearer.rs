//! SASL/OAUTHBEARER (RFC 7628), the server side as Kafka serves it: one client message
//! `n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]...^A`, answered with nothing when the
//! token (a JWT, `jwt::validate`) is valid; the principal is the token's subject, and an
//! authorization id, when given, must name it.
//!
//! Invariant: the message is parsed within `jwt::TOKEN_BYTES_MAX` plus a bounded slack
//! before anything else; the only accepted scheme is Bearer; extensions are parsed and
//! their names checked (as Kafka) but grant nothing.

use super::jwt::{self, ClaimRules, Jwks, Validated};

/// Longest client message: a token at its limit and extensions.
pub const MESSAGE_BYTES_MAX: usize = jwt::TOKEN_BYTES_MAX + 4096;
const KVSEP: char = '\u{1}';

/// Why an OAUTHBEARER message is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OAuthError {
    /// Not an RFC 7628 client response.
    #[error("malformed OAUTHBEARER message: {0}")]
    Malformed(&'static str),
    /// The token is not valid.
    #[error("invalid token: {0}")]
    Token(#[from] jwt::JwtError),
    /// The authorization id names someone else.
    #[error("the authorization id {authzid} is not the token's principal {principal}")]
    Authzid {
        /// Sent.
        authzid: String,
        /// The token's.
        principal: String,
    },
}

/// An RFC 7628 client initial response.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// `a=` of the GS2 header.
    pub authzid: Option<String>,
    /// The bearer token.
    pub token: String,
    /// SASL extensions (KIP-342), `auth` excluded.
    pub extensions: Vec<(String, String)>,
}

/// Parses a client initial response.
pub fn parse(message: &[u8]) -> Result<ClientFirst, OAuthError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(OAuthError::Malformed("longer than the limit"));
    }
    let text = std::str::from_utf8(message).map_err(|_| OAuthError::Malformed("not UTF-8"))?;
    if text == "\u{1}" {
        return Err(OAuthError::Malformed("the client gave up after an error"));
    }
    let rest = text
        .strip_prefix("n,")
        .or_else(|| text.strip_prefix("y,"))
        .ok_or(OAuthError::Malformed("no GS2 header (n, or y,)"))?;
    let (authzid, rest) = rest
        .split_once(',')
        .ok_or(OAuthError::Malformed("GS2 header not closed"))?;
    let authzid = match authzid {
        "" => None,
        a => Some(
            a.strip_prefix("a=")
                .filter(|n| !n.is_empty())
                .ok_or(OAuthError::Malformed("GS2 authorization id is not a=name"))?
                .to_string(),
        ),
    };
    let pairs = rest
        .strip_prefix(KVSEP)
        .and_then(|r| r.strip_suffix(KVSEP))
        .ok_or(OAuthError::Malformed(
            "key-value pairs not delimited by 0x01",
        ))?;
    let mut token = None;
    let mut extensions = Vec::new();
    for pair in pairs.split(KVSEP).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or(OAuthError::Malformed("a pair without '='"))?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(OAuthError::Malformed("a key that is not letters"));
        }
        if !value
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) || b" \t\r\n".contains(&b))
        {
            return Err(OAuthError::Malformed("a value with control characters"));
        }
        if key == "auth" {
            let (scheme, t) = value
                .split_once(' ')
                .ok_or(OAuthError::Malformed("auth is not 'Bearer <token>'"))?;
            if !scheme.eq_ignore_ascii_case("bearer") {
                return Err(OAuthError::Malformed("the scheme is not Bearer"));
            }
            token = Some(t.trim().to_string());
        } else {
            extensions.push((key.to_string(), value.to_string()));
        }
    }
    Ok(ClientFirst {
        authzid,
        token: token.ok_or(OAuthError::Malformed("no auth pair"))?,
        extensions,
    })
}

/// Authenticates a client initial response: what its valid token says.
pub fn authenticate(
    message: &[u8],
    jwks: &Jwks,
    rules: &ClaimRules,
    now_ms: i64,
) -> Result<Validated, OAuthError> {
    let first = parse(message)?;
    let v = jwt::validate(&first.token, jwks, rules, now_ms)?;
    match first.authzid {
        Some(a) if a != v.principal => Err(OAuthError::Authzid {
            authzid: a,
            principal: v.principal,
        }),
        _ => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::jwt::tests::{rs256, rsa_jwks, rsa_key, rules};

    #[test]
    fn kafka_clients_initial_responses_parse() {
        // As the Java client and librdkafka send them.
        let m = parse(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01").expect("parse");
        assert_eq!(m.token, "abc.def.ghi");
        assert_eq!(m.authzid, None);
        let m = parse(b"n,a=svc,\x01auth=Bearer t.t.t\x01traceId=42\x01\x01").expect("parse");
        assert_eq!(m.authzid.as_deref(), Some("svc"));
        assert_eq!(m.extensions, vec![("traceId".into(), "42".into())]);
        for bad in [
            &b""[..],
            b"\x01",
            b"p=tls-unique,,\x01auth=Bearer t\x01\x01",
            b"n,,auth=Bearer t",
            b"n,,\x01auth=Basic dXNlcg==\x01\x01",
            b"n,,\x01x=1\x01\x01",
            b"n,,\x01au th=Bearer t\x01\x01",
            b"n,b=x,\x01auth=Bearer t\x01\x01",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&vec![b'n'; MESSAGE_BYTES_MAX + 1]).is_err());
    }

    #[test]
    fn a_valid_token_authenticates_its_subject_and_no_one_else() {
        let key = rsa_key();
        let jwks = rsa_jwks(&key, "k");
        let now_ms = 1_800_000_000_000i64;
        let claims =
            serde_json::json!({"sub": "svc", "iat": now_ms / 1000, "exp": now_ms / 1000 + 60});
        let token = rs256(&key, "k", &claims);
        let msg = format!("n,,\x01auth=Bearer {token}\x01\x01");
        let v = authenticate(msg.as_bytes(), &jwks, &rules(), now_ms).expect("valid");
        assert_eq!(v.principal, "svc");
        let as_admin = format!("n,a=admin,\x01auth=Bearer {token}\x01\x01");
        assert!(matches!(
            authenticate(as_admin.as_bytes(), &jwks, &rules(), now_ms),
            Err(OAuthError::Authzid { .. })
        ));
        let late = now_ms + 3_600_000;
        assert!(matches!(
            authenticate(msg.as_bytes(), &jwks, &rules(), late),
            Err(OAuthError::Token(_))
        ));
    }
}
