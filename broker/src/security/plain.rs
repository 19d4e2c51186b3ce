//! SASL/PLAIN (RFC 4616) as Kafka serves it: one message, `authzid NUL authcid NUL
//! passwd`; the password is checked against the user's SCRAM credential (the strongest
//! it has), so that one user store serves both mechanisms (Redpanda does the same; Kafka
//! takes PLAIN users from its JAAS file).
//!
//! Invariant: the authorization id, when given, must be the user (Kafka's rule); the
//! message is at most PLAIN_MESSAGE_BYTES_MAX bytes.

use super::scram::Credential;

/// Longest PLAIN message read.
pub const PLAIN_MESSAGE_BYTES_MAX: usize = 4096;

/// Why a PLAIN authentication failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    /// Not `authzid NUL authcid NUL passwd`, or too long.
    #[error("malformed PLAIN message")]
    Malformed,
    /// An authorization id other than the user.
    #[error("an authorization id other than the user name")]
    OtherAuthorizationId,
    /// Unknown user or wrong password.
    #[error("invalid credentials")]
    InvalidCredentials,
}

/// Authenticates one PLAIN message; `lookup` gives the user's SCRAM credentials. The
/// user name on success.
pub fn authenticate(
    message: &[u8],
    lookup: impl FnOnce(&str) -> Vec<Credential>,
) -> Result<String, PlainError> {
    if message.len() > PLAIN_MESSAGE_BYTES_MAX {
        return Err(PlainError::Malformed);
    }
    let mut parts = message.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(PlainError::Malformed);
    };
    let user = std::str::from_utf8(user).map_err(|_| PlainError::Malformed)?;
    if user.is_empty() || password.is_empty() {
        return Err(PlainError::Malformed);
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(PlainError::OtherAuthorizationId);
    }
    let strongest = lookup(user).into_iter().max_by_key(|c| c.mechanism);
    match strongest {
        Some(c) if c.matches_password(password) => Ok(user.to_string()),
        _ => Err(PlainError::InvalidCredentials),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::{Mechanism, ITERATIONS_MIN};

    fn alice(_: &str) -> Vec<Credential> {
        vec![Credential::new(
            Mechanism::Sha256,
            b"wonderland",
            b"salt",
            ITERATIONS_MIN,
        )]
    }

    #[test]
    fn plain_messages() {
        assert_eq!(
            authenticate(b"\0alice\0wonderland", alice),
            Ok("alice".into())
        );
        assert_eq!(
            authenticate(b"alice\0alice\0wonderland", alice),
            Ok("alice".into())
        );
        assert_eq!(
            authenticate(b"bob\0alice\0wonderland", alice),
            Err(PlainError::OtherAuthorizationId)
        );
        assert_eq!(
            authenticate(b"\0alice\0looking-glass", alice),
            Err(PlainError::InvalidCredentials)
        );
        assert_eq!(
            authenticate(b"\0carol\0wonderland", |_| Vec::new()),
            Err(PlainError::InvalidCredentials)
        );
        for bad in [
            &b""[..],
            b"\0alice",
            b"\0\0pw",
            b"\0alice\0",
            b"\0alice\0pw\0x",
            b"\0\xff\0pw",
        ] {
            assert_eq!(
                authenticate(bad, alice),
                Err(PlainError::Malformed),
                "{bad:?}"
            );
        }
    }
}
