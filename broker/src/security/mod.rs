//! Client authentication (issue 23): the SASL mechanisms a Kafka broker serves, as pure
//! state machines over the bytes of SaslAuthenticate — SCRAM-SHA-256 and SCRAM-SHA-512
//! (`scram`, RFC 5802 and RFC 7677) and PLAIN (`plain`, RFC 4616, checked against the
//! user's SCRAM credentials) and OAUTHBEARER (`oauthbearer`, RFC 7628, with the JWT
//! validated by `jwt` against a JWK set). Where credentials live and which listener asks for them is
//! the gateway's and the cluster's. `tls` builds the listeners' rustls configuration from
//! PEM files (and reloads it when they change); `principal` turns a client certificate's
//! subject into a principal with `ssl.principal.mapping.rules`; `acl` is the authorizer
//! over the ACLs the cluster metadata holds; `quota` resolves client quotas and measures
//! rates as Kafka does.
//!
//! Invariant: every length and field a client sends is checked before it is used; a
//! failed exchange says no more than that the credentials are invalid (an unknown user
//! and a wrong password look alike), and nothing here logs a password or a key.
//!
//! May use: `common` only.

pub mod acl;
pub mod jwt;
pub mod oauthbearer;
pub mod plain;
pub mod principal;
pub mod quota;
pub mod scram;
pub mod tls;
