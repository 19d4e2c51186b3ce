//! `strandctl user`: SCRAM users (the `kafka-configs.sh --entity-type users` SCRAM part;
//! AlterUserScramCredentials and DescribeUserScramCredentials). The password is read from
//! stdin (never the command line, which other users can see), salted with 32 random bytes
//! and PBKDF2'd here: the broker gets the salted password, never the password.
//!
//! Invariant: `set` refuses an empty password and iterations outside Kafka's 4096..=16384
//! before sending anything.

use std::io::BufRead;

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use sha2::{Sha256, Sha512};

use crate::cli::UserCmd;
use crate::kafka::{check_code, code_name, KafkaClient};
use crate::output::Table;
use crate::Refused;

/// Kafka's bounds on SCRAM iterations.
const ITERATIONS_MIN: i32 = 4096;
const ITERATIONS_MAX: i32 = 16384;
/// Random salt bytes per credential.
const SALT_BYTES: usize = 32;

/// Kafka's type code and the SaltedPassword length of a SCRAM mechanism name.
fn mechanism(name: &str) -> Result<i8, Refused> {
    match name {
        "SCRAM-SHA-256" => Ok(1),
        "SCRAM-SHA-512" => Ok(2),
        other => Err(Refused(format!(
            "unknown mechanism {other}: SCRAM-SHA-256 or SCRAM-SHA-512"
        ))),
    }
}

fn mechanism_name(kafka_type: i8) -> String {
    match kafka_type {
        1 => "SCRAM-SHA-256".into(),
        2 => "SCRAM-SHA-512".into(),
        t => format!("unknown({t})"),
    }
}

/// SaltedPassword := Hi(password, salt, iterations) (RFC 5802).
fn salted_password(kafka_type: i8, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    if kafka_type == 1 {
        let mut out = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
        out.to_vec()
    } else {
        let mut out = [0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
        out.to_vec()
    }
}

/// Runs a `user` subcommand and returns what to print; `stdin` gives `set`'s password.
pub fn run(
    client: &mut KafkaClient,
    cmd: &UserCmd,
    stdin: &mut dyn BufRead,
) -> anyhow::Result<String> {
    match cmd {
        UserCmd::List => describe(client, None),
        UserCmd::Describe { user } => describe(client, Some(user)),
        UserCmd::Set {
            user,
            mechanism: mech,
            iterations,
        } => {
            let kafka_type = mechanism(mech)?;
            if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(iterations) {
                return Err(Refused(format!(
                    "iterations must be in {ITERATIONS_MIN}..={ITERATIONS_MAX}"
                ))
                .into());
            }
            let mut line = String::new();
            stdin.read_line(&mut line)?;
            let password = line.trim_end_matches(['\r', '\n']);
            if password.is_empty() {
                return Err(Refused("no password on stdin".into()).into());
            }
            let mut salt = vec![0u8; SALT_BYTES];
            rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut salt);
            let salted =
                salted_password(kafka_type, password.as_bytes(), &salt, *iterations as u32);
            let up = ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_string(user.clone()))
                .with_mechanism(kafka_type)
                .with_iterations(*iterations)
                .with_salt(salt.into())
                .with_salted_password(salted.into());
            alter(
                client,
                user,
                AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]),
            )?;
            Ok(format!(
                "user {user}: {mech} credential set ({iterations} iterations)\n"
            ))
        }
        UserCmd::Delete {
            user,
            mechanism: mech,
        } => {
            let del = ScramCredentialDeletion::default()
                .with_name(StrBytes::from_string(user.clone()))
                .with_mechanism(mechanism(mech)?);
            alter(
                client,
                user,
                AlterUserScramCredentialsRequest::default().with_deletions(vec![del]),
            )?;
            Ok(format!("user {user}: {mech} credential deleted\n"))
        }
    }
}

fn alter(
    client: &mut KafkaClient,
    user: &str,
    req: AlterUserScramCredentialsRequest,
) -> anyhow::Result<()> {
    let resp = client.send(&req)?;
    for r in &resp.results {
        check_code(
            r.error_code,
            &format!("change the SCRAM credentials of {user}"),
            r.error_message.as_ref(),
        )?;
    }
    Ok(())
}

/// The users' mechanisms and iterations (every user's when `user` is `None`).
fn describe(client: &mut KafkaClient, user: Option<&String>) -> anyhow::Result<String> {
    let users = user.map(|u| vec![UserName::default().with_name(StrBytes::from_string(u.clone()))]);
    let resp = client.send(&DescribeUserScramCredentialsRequest::default().with_users(users))?;
    check_code(
        resp.error_code,
        "describe SCRAM users",
        resp.error_message.as_ref(),
    )?;
    let mut t = Table::new(&["USER", "MECHANISM", "ITERATIONS", "ERROR"]);
    for r in &resp.results {
        if r.error_code != 0 {
            if user.is_some() {
                check_code(
                    r.error_code,
                    &format!("describe user {}", r.user.as_str()),
                    r.error_message.as_ref(),
                )?;
            }
            t.row(vec![
                r.user.to_string(),
                "-".into(),
                "-".into(),
                code_name(r.error_code),
            ]);
            continue;
        }
        for c in &r.credential_infos {
            t.row(vec![
                r.user.to_string(),
                mechanism_name(c.mechanism),
                c.iterations.to_string(),
                String::new(),
            ]);
        }
    }
    Ok(t.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salted_password_is_rfc_7677s() {
        // RFC 7677: "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ== (base64), 4096 iterations.
        let salt = [
            0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36,
            0xfa, 0x81,
        ];
        let salted = salted_password(1, b"pencil", &salt, 4096);
        assert_eq!(salted.len(), 32);
        assert_eq!(salted_password(2, b"pencil", &salt, 4096).len(), 64);
        assert_ne!(salted, salted_password(1, b"pencil2", &salt, 4096));
    }

    #[test]
    fn mechanisms_are_kafkas_codes() {
        assert_eq!(mechanism("SCRAM-SHA-256").ok(), Some(1));
        assert_eq!(mechanism("SCRAM-SHA-512").ok(), Some(2));
        assert!(mechanism("PLAIN").is_err());
        assert_eq!(mechanism_name(2), "SCRAM-SHA-512");
    }
}
