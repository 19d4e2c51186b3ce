//! The bearer token the admin API's mutating endpoints (`PUT /v1/log-level`) require:
//! `Authorization: Bearer <token>`. It is read at start-up from `admin_token_file`
//! (default `<data_dir>/admin-token`), created there with a random token, readable by
//! its owner only, when missing, so that a local operator (or `strandctl`) can read it and
//! nobody else on the network can change the broker.
//!
//! Invariant: a mutating request is served only with the exact token (compared in time
//! independent of where it differs); the token is never logged.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{bail, Context};

/// Random bytes in a created token (hex-encoded in the file: 64 characters).
pub const ADMIN_TOKEN_RANDOM_BYTES: usize = 32;
/// Shortest token accepted from a file an operator wrote.
pub const ADMIN_TOKEN_CHARS_MIN: usize = 16;
/// Longest token file read.
const ADMIN_TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// The token in `path`, created (mode 0600) with a random one when the file is missing.
/// Runs before the shards start (blocking file I/O is fine there).
pub fn load_or_create(path: &Path) -> anyhow::Result<String> {
    match std::fs::File::open(path) {
        Ok(f) => {
            let mut text = String::new();
            f.take(ADMIN_TOKEN_FILE_BYTES_MAX)
                .read_to_string(&mut text)
                .with_context(|| format!("reading the admin token file {}", path.display()))?;
            let token = text.trim().to_string();
            if token.len() < ADMIN_TOKEN_CHARS_MIN || token.chars().any(char::is_whitespace) {
                bail!(
                    "the admin token file {} must hold one token of at least {ADMIN_TOKEN_CHARS_MIN} \
                     characters without spaces (delete it and strand writes a random one)",
                    path.display()
                );
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(e) => {
            Err(e).with_context(|| format!("opening the admin token file {}", path.display()))
        }
    }
}

fn create(path: &Path) -> anyhow::Result<String> {
    let mut random = [0u8; ADMIN_TOKEN_RANDOM_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .context("reading /dev/urandom for the admin token")?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating {} for the admin token", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating the admin token file {}", path.display()))?;
    f.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing the admin token file {}", path.display()))?;
    tracing::info!(file = %path.display(), "admin token created for the admin API's mutating endpoints");
    Ok(token)
}

/// Whether request `head` carries `Authorization: Bearer <token>` (never with an empty
/// `token`: one not loaded authorizes nothing).
pub fn authorized(head: &str, token: &str) -> bool {
    !token.is_empty()
        && head.lines().skip(1).any(|line| {
            let Some((k, v)) = line.split_once(':') else {
                return false;
            };
            let Some(given) = v.trim().strip_prefix("Bearer ") else {
                return false;
            };
            k.trim().eq_ignore_ascii_case("authorization") && same(given.trim(), token)
        })
}

/// Compares without returning early at the first difference.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123";

    #[test]
    fn only_the_exact_bearer_token_is_authorized() {
        let head = |auth: &str| format!("PUT /v1/log-level HTTP/1.1\r\n{auth}\r\nHost: x\r\n\r\n");
        assert!(authorized(
            &head(&format!("Authorization: Bearer {TOKEN}")),
            TOKEN
        ));
        assert!(authorized(
            &head(&format!("authorization:   Bearer {TOKEN} ")),
            TOKEN
        ));
        assert!(!authorized(
            &head("Authorization: Bearer 0123456789abcdef012"),
            TOKEN
        ));
        assert!(!authorized(
            &head("Authorization: Bearer 0123456789abcdef0124"),
            TOKEN
        ));
        assert!(!authorized(
            &head(&format!("Authorization: Basic {TOKEN}")),
            TOKEN
        ));
        assert!(!authorized(
            &head(&format!("X-Authorization: Bearer {TOKEN}")),
            TOKEN
        ));
        assert!(!authorized(&head("Host: y"), TOKEN));
        assert!(!authorized(&head("Authorization: Bearer "), ""));
        // The request line is not a header.
        assert!(!authorized(
            &format!("Authorization: Bearer {TOKEN}\r\n\r\n"),
            TOKEN
        ));
    }

    #[test]
    fn a_missing_token_file_is_created_private_and_then_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("admin-token");
        let made = load_or_create(&path).expect("created");
        assert_eq!(made.len(), ADMIN_TOKEN_RANDOM_BYTES * 2);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(&path).expect("read"), made);
        std::fs::write(&path, "short\n").expect("write");
        assert!(
            load_or_create(&path).is_err(),
            "too short a token is refused"
        );
    }
}
