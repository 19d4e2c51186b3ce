//! SASL on the SASL_PLAINTEXT and SASL_SSL listeners (issue 23): until a connection has authenticated it
//! gets ApiVersions, SaslHandshake (v0–1) and SaslAuthenticate (v0–2) and nothing else;
//! the mechanisms are `security`'s (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) over the SCRAM
//! credentials in the cluster metadata (AlterUserScramCredentials), and OAUTHBEARER when
//! a JWK set is configured (the token's subject is the user). After a v0 handshake
//! the client sends bare SASL tokens, each with a 4-byte length and no Kafka header, as
//! Kafka allows for clients that predate SaslAuthenticate.
//!
//! With `connections_max_reauth_ms` (KIP-368) a session lasts that long (an OAUTHBEARER
//! one no longer than its token): SaslAuthenticate
//! tells the client, which re-authenticates in place (SaslHandshake v1 again, as the same
//! user); a request after the session ended closes the connection.
//!
//! Invariant: a connection is served only as the user it proved to be; any other request
//! before that, a second handshake, or a failed proof ends the connection (the failure
//! answered, after `AUTH_FAILURE_DELAY`, as Kafka's `connection.failed.authentication.delay.ms`).

use std::rc::Rc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Conn, Ctx, FramingError};
use crate::security::jwt::JwksFile;
use crate::security::scram::{Credential, Mechanism, ServerExchange, Step};
use crate::security::{oauthbearer, plain};
use crate::shard::Shard;

/// How long a failed authentication waits before its answer (Kafka's default
/// `connection.failed.authentication.delay.ms`), to slow down guessing.
pub const AUTH_FAILURE_DELAY: Duration = Duration::from_millis(100);
/// The mechanisms always offered, in the order SaslHandshake lists them (OAUTHBEARER
/// follows when configured).
pub const MECHANISMS: [&str; 3] = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"];
/// The token mechanism (`sasl_oauthbearer_jwks_endpoint_url`).
const OAUTHBEARER: &str = "OAUTHBEARER";
/// Failed authentications are logged at most once per this interval (per shard).
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

thread_local! {
    /// This shard's limit on failure warnings (a shard is a thread).
    static FAILURE_LOG: crate::common::logging::RateLimit =
        crate::common::logging::RateLimit::new(FAILURE_LOG_INTERVAL);
    /// This shard's copy of the OAUTHBEARER JWK set, read at the first use.
    static JWKS: std::cell::RefCell<Option<JwksFile>> = const { std::cell::RefCell::new(None) };
}

/// Validates an OAUTHBEARER client message with this shard's JWK set: the user and when
/// the token expires (ms since the epoch).
fn oauthbearer_user(shard: &Shard, message: &[u8]) -> Result<(String, i64), String> {
    let Some(rules) = &shard.config.oauthbearer else {
        return Err("OAUTHBEARER is not configured".into());
    };
    let now = crate::common::clock::now();
    JWKS.with(|cell| {
        let mut file = cell.borrow_mut();
        if file.is_none() {
            *file = Some(JwksFile::load(&rules.jwks_path, now).map_err(|e| e.to_string())?);
        }
        let jwks = file.as_mut().map(|f| f.current(now)).ok_or("no JWK set")?;
        let wall_ms = crate::common::clock::wall_ms();
        oauthbearer::authenticate(message, jwks, rules, wall_ms)
            .map(|v| (v.principal, v.expires_at_ms))
            .map_err(|e| e.to_string())
    })
}

/// SASL_AUTHENTICATION_FAILED.
const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// UNSUPPORTED_SASL_MECHANISM.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// ILLEGAL_SASL_STATE.
pub const ILLEGAL_SASL_STATE: i16 = 34;

/// The mechanism chosen by a handshake.
#[derive(Clone, Debug)]
enum Chosen {
    Plain,
    Scram(Box<ServerExchange>),
    OAuthBearer,
}

/// Where a connection's authentication is.
#[derive(Clone, Debug)]
enum State {
    /// Nothing but ApiVersions yet.
    Start,
    /// Handshaken; `raw`: v0, so bare tokens follow.
    Handshaken { chosen: Chosen, raw: bool },
    /// Authenticated as this user.
    Done(String),
}

/// What the gate does with a frame.
pub enum Gate {
    /// Answer it (the frame was the gate's).
    Answer(Bytes),
    /// Answer it, then close the connection (a failed authentication).
    AnswerAndClose(Bytes),
    /// Close the connection without an answer.
    Close(&'static str),
}

/// One connection's SASL state.
#[derive(Clone, Debug)]
pub struct SaslConn {
    state: State,
    /// The user a re-authentication (KIP-368) must prove to be again.
    previous: Option<String>,
    /// When the session ends (`connections_max_reauth_ms`): a request after it closes the
    /// connection unless it re-authenticated.
    session_expires: Option<std::time::Instant>,
    /// When the credential just proven expires (an OAUTHBEARER token), ms since the epoch.
    credential_expires_ms: Option<i64>,
}

impl Default for SaslConn {
    fn default() -> Self {
        SaslConn {
            state: State::Start,
            previous: None,
            session_expires: None,
            credential_expires_ms: None,
        }
    }
}

impl SaslConn {
    /// The user once authenticated.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            State::Done(u) => Some(u),
            _ => None,
        }
    }

    /// Whether the session of an authenticated connection has ended (KIP-368).
    pub fn expired(&self, now: std::time::Instant) -> bool {
        self.session_expires.is_some_and(|t| now >= t)
    }

    /// A SaslHandshake on an authenticated connection starts a re-authentication
    /// (KIP-368; v1 only, as Kafka): the same user must authenticate again.
    pub fn begin_reauthentication(&mut self) {
        if let State::Done(user) = &self.state {
            self.previous = Some(user.clone());
            self.state = State::Start;
        }
    }

    /// Takes one frame of a connection that has not authenticated yet; a connection it
    /// closes is logged (at most once per FAILURE_LOG_INTERVAL on a shard).
    pub async fn serve(&mut self, shard: &Rc<Shard>, frame: Bytes, conn: &Conn) -> Gate {
        let gate = self.gate(shard, frame, conn).await;
        if let Gate::AnswerAndClose(_) | Gate::Close(_) = gate {
            let why = match &gate {
                Gate::Close(why) => *why,
                _ => "authentication failed",
            };
            FAILURE_LOG.with(|limit| {
                if let Some(suppressed) = limit.allow(crate::common::clock::now()) {
                    tracing::warn!(
                        client = &*conn.host,
                        why,
                        suppressed,
                        "SASL connection closed before authentication"
                    );
                }
            });
        }
        gate
    }

    async fn gate(&mut self, shard: &Rc<Shard>, frame: Bytes, conn: &Conn) -> Gate {
        if let State::Handshaken { raw: true, .. } = self.state {
            return self.raw_token(shard, frame).await;
        }
        let Some(h) = frame.first_chunk::<4>() else {
            return Gate::Close("a request shorter than its header");
        };
        let key = ApiKey::try_from(i16::from_be_bytes([h[0], h[1]]));
        let version = i16::from_be_bytes([h[2], h[3]]);
        match key {
            Ok(ApiKey::ApiVersions) => {
                api_versions(frame, version, conn, shard.config.group_share_enable)
            }
            Ok(ApiKey::SaslHandshake) if (0..=1).contains(&version) => {
                self.handshake(frame, version, conn, shard.config.oauthbearer.is_some())
            }
            Ok(ApiKey::SaslAuthenticate) if (0..=2).contains(&version) => {
                self.authenticate(shard, frame, version, conn).await
            }
            _ => Gate::Close("a request before SASL authentication"),
        }
    }

    /// A SaslHandshake; `oauth`: OAUTHBEARER is configured.
    fn handshake(&mut self, frame: Bytes, version: i16, conn: &Conn, oauth: bool) -> Gate {
        if !matches!(self.state, State::Start) {
            return Gate::Close("a second SaslHandshake");
        }
        if self.previous.is_some() && version == 0 {
            return Gate::Close("a re-authentication with SaslHandshake v0");
        }
        let Ok((ctx, body)) = context(frame, ApiKey::SaslHandshake, version, conn) else {
            return Gate::Close("a malformed SaslHandshake");
        };
        let Ok(req) = ctx.decode::<SaslHandshakeRequest>(body) else {
            return Gate::Close("a malformed SaslHandshake");
        };
        let mechanisms = MECHANISMS
            .iter()
            .chain(oauth.then_some(&OAUTHBEARER))
            .map(|m| StrBytes::from_static_str(m))
            .collect();
        let chosen = match req.mechanism.as_str() {
            "PLAIN" => Some(Chosen::Plain),
            OAUTHBEARER if oauth => Some(Chosen::OAuthBearer),
            m => Mechanism::from_name(m).map(|m| {
                let nonce = uuid::Uuid::new_v4().simple().to_string();
                Chosen::Scram(Box::new(ServerExchange::new(m, nonce)))
            }),
        };
        let resp = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
        match chosen {
            Some(chosen) => {
                self.state = State::Handshaken {
                    chosen,
                    raw: version == 0,
                };
                answer(ctx.respond(&resp))
            }
            None => match ctx.respond(&resp.with_error_code(UNSUPPORTED_SASL_MECHANISM)) {
                Ok(b) => Gate::AnswerAndClose(b),
                Err(_) => Gate::Close("an unsupported mechanism"),
            },
        }
    }

    async fn authenticate(
        &mut self,
        shard: &Rc<Shard>,
        frame: Bytes,
        version: i16,
        conn: &Conn,
    ) -> Gate {
        let Ok((ctx, body)) = context(frame, ApiKey::SaslAuthenticate, version, conn) else {
            return Gate::Close("a malformed SaslAuthenticate");
        };
        let Ok(req) = ctx.decode::<SaslAuthenticateRequest>(body) else {
            return Gate::Close("a malformed SaslAuthenticate");
        };
        if !matches!(self.state, State::Handshaken { raw: false, .. }) {
            let resp = SaslAuthenticateResponse::default()
                .with_error_code(ILLEGAL_SASL_STATE)
                .with_error_message(Some(StrBytes::from_static_str(
                    "SaslAuthenticate before SaslHandshake",
                )));
            return close_after(ctx.respond(&resp));
        }
        match self.step(shard, &req.auth_bytes) {
            Ok(token) => {
                let mut resp = SaslAuthenticateResponse::default().with_auth_bytes(token);
                if self.user().is_some() {
                    resp = resp.with_session_lifetime_ms(self.start_session(shard));
                }
                answer(ctx.respond(&resp))
            }
            Err(why) => {
                crate::runtime::task::sleep(AUTH_FAILURE_DELAY).await;
                let resp = SaslAuthenticateResponse::default()
                    .with_error_code(SASL_AUTHENTICATION_FAILED)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "Authentication failed: {why}"
                    ))));
                close_after(ctx.respond(&resp))
            }
        }
    }

    /// Starts the session of a connection that (re-)authenticated: the session lifetime to
    /// tell the client, 0 without `connections_max_reauth_ms`; no longer than the
    /// credential's (an OAUTHBEARER token's), as Kafka.
    fn start_session(&mut self, shard: &Shard) -> i64 {
        let max_ms = i64::try_from(shard.config.connections_max_reauth_ms).unwrap_or(i64::MAX);
        if max_ms == 0 {
            self.session_expires = None;
            return 0;
        }
        let wall_ms = crate::common::clock::wall_ms();
        let ms = self
            .credential_expires_ms
            .map_or(max_ms, |exp| exp.saturating_sub(wall_ms).clamp(1, max_ms));
        self.session_expires =
            Some(crate::common::clock::now() + std::time::Duration::from_millis(ms.unsigned_abs()));
        ms
    }

    /// A bare token after a v0 handshake: the answer is a bare token too.
    async fn raw_token(&mut self, shard: &Rc<Shard>, token: Bytes) -> Gate {
        match self.step(shard, &token) {
            Ok(answer) => {
                let mut out = BytesMut::with_capacity(4 + answer.len());
                out.put_u32(u32::try_from(answer.len()).unwrap_or(0));
                out.put_slice(&answer);
                Gate::Answer(out.freeze())
            }
            Err(_) => {
                crate::runtime::task::sleep(AUTH_FAILURE_DELAY).await;
                Gate::Close("a failed SASL authentication (v0)")
            }
        }
    }

    /// One client token of the chosen mechanism: the token to answer with. On success
    /// the connection is authenticated once the exchange is done.
    fn step(&mut self, shard: &Rc<Shard>, token: &[u8]) -> Result<Bytes, String> {
        let meta = shard.metadata();
        let credentials = |user: &str| -> Vec<Credential> {
            meta.scram.get(user).map_or_else(Vec::new, |by_mech| {
                by_mech
                    .iter()
                    .filter_map(|(m, c)| {
                        let mechanism = Mechanism::from_kafka_type(*m)?;
                        Some(Credential {
                            mechanism,
                            salt: c.salt.clone(),
                            iterations: u32::try_from(c.iterations).ok()?,
                            stored_key: c.stored_key.clone(),
                            server_key: c.server_key.clone(),
                        })
                    })
                    .collect()
            })
        };
        let State::Handshaken { chosen, raw } = &mut self.state else {
            return Err("no mechanism chosen".into());
        };
        let raw = *raw;
        self.credential_expires_ms = None;
        let outcome = match chosen {
            Chosen::Plain => plain::authenticate(token, credentials)
                .map(|user| (Bytes::new(), Some(user)))
                .map_err(|e| e.to_string()),
            Chosen::OAuthBearer => oauthbearer_user(shard, token).map(|(user, expires_ms)| {
                self.credential_expires_ms = Some(expires_ms);
                (Bytes::new(), Some(user))
            }),
            Chosen::Scram(x) => {
                let mechanism = x.mechanism();
                let lookup = |user: &str| {
                    credentials(user)
                        .into_iter()
                        .find(|c| c.mechanism == mechanism)
                };
                match x.step(token, lookup) {
                    Ok(Step::Continue(b)) => Ok((Bytes::from(b), None)),
                    Ok(Step::Done { response, user }) => Ok((Bytes::from(response), Some(user))),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        match outcome {
            Ok((_, Some(user))) if self.previous.as_ref().is_some_and(|p| *p != user) => {
                shard.metrics.sasl_failure();
                Err("a re-authentication cannot change the user".into())
            }
            Ok((answer, Some(user))) => {
                tracing::debug!(%user, raw, "SASL authentication succeeded");
                if raw {
                    self.start_session(shard);
                }
                self.state = State::Done(user);
                self.previous = None;
                Ok(answer)
            }
            Ok((answer, None)) => Ok(answer),
            Err(why) => {
                shard.metrics.sasl_failure();
                Err(why)
            }
        }
    }
}

/// ApiVersions before authentication (what a client asks first, to learn the SASL
/// versions).
fn api_versions(frame: Bytes, version: i16, conn: &Conn, share: bool) -> Gate {
    let supported = super::SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == ApiKey::ApiVersions)
        .is_some_and(|&(_, lo, hi)| (lo..=hi).contains(&version));
    if !supported {
        let corr = frame
            .get(4..8)
            .and_then(|s| s.first_chunk::<4>())
            .map(|a| i32::from_be_bytes(*a));
        return match corr.map(|c| super::api_versions::unsupported_version(c, share)) {
            Some(Ok(b)) => Gate::Answer(b),
            _ => Gate::Close("a malformed ApiVersions"),
        };
    }
    match context(frame, ApiKey::ApiVersions, version, conn) {
        Ok((ctx, body)) => answer(super::api_versions::handle(&ctx, body, share)),
        Err(_) => Gate::Close("a malformed ApiVersions"),
    }
}

/// The context and body of a gate request.
fn context(
    frame: Bytes,
    key: ApiKey,
    version: i16,
    conn: &Conn,
) -> Result<(Ctx, Bytes), FramingError> {
    Ctx::from_frame(frame, key, version, conn)
}

fn answer(r: Result<Bytes, FramingError>) -> Gate {
    match r {
        Ok(b) => Gate::Answer(b),
        Err(_) => Gate::Close("an answer that does not encode"),
    }
}

fn close_after(r: Result<Bytes, FramingError>) -> Gate {
    match r {
        Ok(b) => Gate::AnswerAndClose(b),
        Err(_) => Gate::Close("an answer that does not encode"),
    }
}

/// SaslHandshake or SaslAuthenticate on a connection that needs none (a PLAINTEXT
/// listener, or one already authenticated): ILLEGAL_SASL_STATE, as Kafka answers.
pub fn refused(ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    match ctx.key {
        ApiKey::SaslHandshake => {
            let _: SaslHandshakeRequest = ctx.decode(body)?;
            ctx.respond(&SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE))
        }
        _ => {
            let _: SaslAuthenticateRequest = ctx.decode(body)?;
            ctx.respond(
                &SaslAuthenticateResponse::default()
                    .with_error_code(ILLEGAL_SASL_STATE)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "no SASL authentication on this connection",
                    ))),
            )
        }
    }
}
