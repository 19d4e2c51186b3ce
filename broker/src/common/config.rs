//! Broker configuration: built-in defaults < TOML file (`--config`) < `STRAND_*`
//! environment variables < command-line flags; validated at start with clear errors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

pub use crate::common::listeners::{ListenerConfig, SecurityProtocol};

/// Largest request frame we allocate for (Kafka's `socket.request.max.bytes` default).
pub const REQUEST_BYTES_MAX: usize = 100 * 1024 * 1024;
/// Kafka's `message.max.bytes` default: the largest record batch accepted.
pub const MESSAGE_MAX_BYTES_DEFAULT: usize = 1_048_588;
/// The `compression.type` values Kafka accepts, for topics and the broker default.
pub const COMPRESSION_TYPES: [&str; 6] =
    ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
/// Kafka's default `compression.type`: keep the producer's codec.
pub const COMPRESSION_TYPE_DEFAULT: &str = "producer";
/// The `message.timestamp.type` values.
pub const MESSAGE_TIMESTAMP_TYPES: [&str; 2] = ["CreateTime", "LogAppendTime"];
/// Kafka's default `message.timestamp.type`.
pub const MESSAGE_TIMESTAMP_TYPE_DEFAULT: &str = "CreateTime";
const _: () = assert!(MESSAGE_MAX_BYTES_DEFAULT <= REQUEST_BYTES_MAX);
/// Kafka's `fetch.max.bytes` default (55 MiB): the most record bytes one Fetch response
/// holds, whatever the request asks (the first batch of the first non-empty partition is
/// returned whole even when larger, as Kafka does).
pub const FETCH_MAX_BYTES_DEFAULT: usize = 55 * 1024 * 1024;
/// Kafka's `log.retention.check.interval.ms` default (5 minutes).
pub const RETENTION_CHECK_INTERVAL_MS_DEFAULT: u64 = 300_000;
/// Default `produce_slow_log_ms`: a produce answered a second or more after it was read
/// is logged with its timeline.
pub const PRODUCE_SLOW_LOG_MS_DEFAULT: u64 = 1_000;
/// Kafka's `log.cleaner.backoff.ms` default: how long a shard's cleaner sleeps when no
/// compacted partition is worth a pass.
pub const LOG_CLEANER_BACKOFF_MS_DEFAULT: u64 = 15_000;
/// Strand's cap on a shard's log cleaner I/O while its producers are writing (a producer's
/// flush within the last second), read plus written: 32 MiB/s. Measured on the
/// development VM (issue 21 note, `bench/cleaner-impact.sh`): unlimited, the cleaner had a
/// read in the disk's queue most of the time and produce p99 was 1.9x that without it.
pub const LOG_CLEANER_IO_BUSY_MAX_BYTES_PER_SECOND_DEFAULT: u64 = 32 * 1024 * 1024;
/// Kafka's `offsets.retention.minutes` default (7 days).
pub const OFFSETS_RETENTION_MINUTES_DEFAULT: u64 = 10_080;
/// Kafka's `offsets.retention.check.interval.ms` default (10 minutes).
pub const OFFSETS_RETENTION_CHECK_INTERVAL_MS_DEFAULT: u64 = 600_000;

/// Kafka's `transaction.state.log.num.partitions` default.
pub const TRANSACTION_STATE_NUM_PARTITIONS_DEFAULT: usize = 50;
/// Kafka's `transaction.max.timeout.ms` default: longer `transaction.timeout.ms` values
/// are refused with INVALID_TRANSACTION_TIMEOUT.
pub const TRANSACTION_MAX_TIMEOUT_MS_DEFAULT: u64 = 900_000;
/// Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms` default.
pub const TRANSACTION_ABORT_CHECK_INTERVAL_MS_DEFAULT: u64 = 10_000;
/// A secret (the admin token): never printed, not even by `Debug`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// The admin token's file in the data directory unless `admin_token_file` says otherwise.
pub const ADMIN_TOKEN_FILE_NAME: &str = "admin-token";
/// Kafka's `transactional.id.expiration.ms` default (7 days).
pub const TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT: u64 = 604_800_000;
/// Kafka's `transaction.remove.expired.transaction.cleanup.interval.ms` default (1 hour).
pub const TRANSACTION_EXPIRY_CHECK_INTERVAL_MS_DEFAULT: u64 = 3_600_000;

/// Kafka's `quota.window.num` default.
pub const QUOTA_WINDOW_NUM_DEFAULT: usize = 11;
/// Kafka's `quota.window.size.seconds` default.
pub const QUOTA_WINDOW_SIZE_SECONDS_DEFAULT: u64 = 1;

/// Default native handshake port (ARCHITECTURE.md, Native protocol).
pub const NATIVE_PORT_DEFAULT: u16 = 9093;
/// Default first per-shard native port: shard s listens on 9094 + s.
pub const NATIVE_SHARD_BASE_PORT_DEFAULT: u16 = 9094;

/// Command-line flags; each also reads its `STRAND_*` environment variable.
#[derive(clap::Parser, Debug, Default)]
#[command(
    name = "strand",
    version,
    about = "Strand: a thread-per-core Kafka-compatible broker"
)]
pub struct Flags {
    /// TOML configuration file (keys as the long flags, with underscores).
    #[arg(long, env = "STRAND_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory.
    #[arg(long, env = "STRAND_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Kafka listener address: the one PLAINTEXT listener when `listeners` is not set.
    #[arg(long, env = "STRAND_KAFKA_ADDR")]
    pub kafka_addr: Option<SocketAddr>,
    /// Kafka listeners, `NAME://host:port,...` as Kafka's `listeners` (e.g.
    /// `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`); replaces `kafka_addr`.
    #[arg(long, env = "STRAND_LISTENERS")]
    pub listeners: Option<String>,
    /// What clients are told per listener, `NAME://host:port,...` (`advertised.listeners`;
    /// default: `advertised_host`, or the listener's IP, and its port).
    #[arg(long, env = "STRAND_ADVERTISED_LISTENERS")]
    pub advertised_listeners: Option<String>,
    /// Security protocol of each custom listener name, `NAME:PROTOCOL,...`
    /// (`listener.security.protocol.map`; PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL name
    /// themselves).
    #[arg(long, env = "STRAND_LISTENER_SECURITY_PROTOCOL_MAP")]
    pub listener_security_protocol_map: Option<String>,
    /// The listener other nodes reach this one on (`inter.broker.listener.name`; default
    /// PLAINTEXT if there is one, else the first listener).
    #[arg(long, env = "STRAND_INTER_BROKER_LISTENER_NAME")]
    pub inter_broker_listener_name: Option<String>,
    /// PEM file of the certificate chain the TLS listeners present (leaf first).
    #[arg(long, env = "STRAND_SSL_CERTIFICATE_LOCATION")]
    pub ssl_certificate_location: Option<PathBuf>,
    /// PEM file of its private key (PKCS#8, PKCS#1 or SEC1; not encrypted).
    #[arg(long, env = "STRAND_SSL_KEY_LOCATION")]
    pub ssl_key_location: Option<PathBuf>,
    /// PEM file of the CA certificates client certificates must chain to (mutual TLS).
    #[arg(long, env = "STRAND_SSL_CA_LOCATION")]
    pub ssl_ca_location: Option<PathBuf>,
    /// Client certificates on SSL listeners: `none`, `requested` or `required`
    /// (`ssl.client.auth`; SASL_SSL listeners ask for none, as Kafka's).
    #[arg(long, env = "STRAND_SSL_CLIENT_AUTH", value_enum)]
    pub ssl_client_auth: Option<ClientAuth>,
    /// PEM file of this node's certificate chain for the connections between nodes (Raft
    /// RPC and joins): with `rpc_tls_key_location` and `rpc_tls_ca_location`, every such
    /// connection is mutual TLS and a peer must present a certificate of the cluster CA.
    #[arg(long, env = "STRAND_RPC_TLS_CERTIFICATE_LOCATION")]
    pub rpc_tls_certificate_location: Option<PathBuf>,
    /// PEM file of its private key.
    #[arg(long, env = "STRAND_RPC_TLS_KEY_LOCATION")]
    pub rpc_tls_key_location: Option<PathBuf>,
    /// PEM file of the cluster CA: the only issuer of node certificates this node accepts.
    #[arg(long, env = "STRAND_RPC_TLS_CA_LOCATION")]
    pub rpc_tls_ca_location: Option<PathBuf>,
    /// The JWK set SASL/OAUTHBEARER tokens are verified with: a file (`file:///path` or a
    /// path), read again when it changes (`sasl.oauthbearer.jwks.endpoint.url`). Set, the
    /// SASL listeners offer OAUTHBEARER.
    #[arg(long, env = "STRAND_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL")]
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// Audiences a token's `aud` must name one of, comma-separated (unchecked if unset).
    #[arg(long, env = "STRAND_SASL_OAUTHBEARER_EXPECTED_AUDIENCE")]
    pub sasl_oauthbearer_expected_audience: Option<String>,
    /// The issuer a token's `iss` must be (unchecked if unset).
    #[arg(long, env = "STRAND_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// The claim naming the principal (default `sub`).
    #[arg(long, env = "STRAND_SASL_OAUTHBEARER_SUB_CLAIM_NAME")]
    pub sasl_oauthbearer_sub_claim_name: Option<String>,
    /// The claim holding the scopes (default `scope`).
    #[arg(long, env = "STRAND_SASL_OAUTHBEARER_SCOPE_CLAIM_NAME")]
    pub sasl_oauthbearer_scope_claim_name: Option<String>,
    /// Clock difference tolerated in `exp` and `nbf` checks (default 30 s).
    #[arg(long, env = "STRAND_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS")]
    pub sasl_oauthbearer_clock_skew_seconds: Option<u64>,
    /// Check every request against the ACLs (CreateAcls); off: everyone may do everything,
    /// as Kafka without `authorizer.class.name`.
    #[arg(long, env = "STRAND_AUTHORIZER_ENABLED")]
    pub authorizer_enabled: Option<bool>,
    /// Principals allowed everything, `User:a;User:b` (`super.users`).
    #[arg(long, env = "STRAND_SUPER_USERS")]
    pub super_users: Option<String>,
    /// Allow what no ACL names a resource for (`allow.everyone.if.no.acl.found`; default
    /// false).
    #[arg(long, env = "STRAND_ALLOW_EVERYONE_IF_NO_ACL_FOUND")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// Serve the native protocol listeners over TLS with the Kafka listeners' certificate
    /// (`ssl_*`; client certificates as `ssl_client_auth` says).
    #[arg(long, env = "STRAND_NATIVE_TLS")]
    pub native_tls: Option<bool>,
    /// Serve the admin API over HTTPS with the listeners' certificate (`ssl_*`); a client
    /// certificate of `ssl_ca_location`'s CA then authorizes its mutating endpoints as the
    /// bearer token does.
    #[arg(long, env = "STRAND_ADMIN_TLS")]
    pub admin_tls: Option<bool>,
    /// How long a SASL session lasts before the client must re-authenticate
    /// (`connections.max.reauth.ms`, KIP-368); 0: for ever.
    #[arg(long, env = "STRAND_CONNECTIONS_MAX_REAUTH_MS")]
    pub connections_max_reauth_ms: Option<u64>,
    /// Samples a client quota's rate is measured over (`quota.window.num`).
    #[arg(long, env = "STRAND_QUOTA_WINDOW_NUM")]
    pub quota_window_num: Option<usize>,
    /// Length of each sample in seconds (`quota.window.size.seconds`).
    #[arg(long, env = "STRAND_QUOTA_WINDOW_SIZE_SECONDS")]
    pub quota_window_size_seconds: Option<u64>,
    /// How a client certificate's subject becomes its principal
    /// (`ssl.principal.mapping.rules`, e.g. `RULE:^CN=(.*?),.*$/$1/,DEFAULT`).
    #[arg(long, env = "STRAND_SSL_PRINCIPAL_MAPPING_RULES")]
    pub ssl_principal_mapping_rules: Option<String>,
    /// Admin HTTP listener address (health, status, Prometheus metrics).
    #[arg(long, env = "STRAND_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Native protocol listener for the handshake (every shard accepts on it).
    #[arg(long, env = "STRAND_NATIVE_ADDR")]
    pub native_addr: Option<SocketAddr>,
    /// First per-shard native port: shard s serves port base + s on the native address's
    /// IP. 0 = an ephemeral port per shard (announced in the handshake).
    #[arg(long, env = "STRAND_NATIVE_SHARD_BASE_PORT")]
    pub native_shard_base_port: Option<u16>,
    /// Host name advertised to Kafka clients (default: the listener's IP).
    #[arg(long, env = "STRAND_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,
    /// Number of shards (cores) to use; default: every CPU in the affinity mask.
    #[arg(long, env = "STRAND_SMP")]
    pub smp: Option<usize>,
    /// This node's id.
    #[arg(long, env = "STRAND_NODE_ID")]
    pub node_id: Option<i32>,
    /// Create unknown topics on Metadata/Produce (`auto.create.topics.enable`).
    #[arg(long, env = "STRAND_AUTO_CREATE_TOPICS")]
    pub auto_create_topics: Option<bool>,
    /// Partitions of auto-created topics (`num.partitions`).
    #[arg(long, env = "STRAND_NUM_PARTITIONS")]
    pub num_partitions: Option<i32>,
    /// Allow buffered I/O when the data directory cannot do O_DIRECT (slower, no
    /// predictable latency; for tmpfs test setups).
    #[arg(long, env = "STRAND_ALLOW_BUFFERED_IO")]
    pub allow_buffered_io: Option<bool>,
    /// Let a shard's partitions whose writes land in blocks already written share one
    /// fdatasync (one device cache flush) instead of one each; only ever on ext4 or XFS
    /// with O_DIRECT. Default true; false syncs every partition's file on its own.
    #[arg(long, env = "STRAND_SHARED_DEVICE_FLUSH")]
    pub shared_device_flush: Option<bool>,
    /// Default `segment.bytes` of new partitions.
    #[arg(long, env = "STRAND_SEGMENT_BYTES")]
    pub segment_bytes: Option<u64>,
    /// Least microseconds between the starts of two flushes of one partition (group
    /// commit pacing; 0 = flush as soon as the previous flush ends). A virtualized disk
    /// whose host takes CPU from the guest above a few thousand I/Os per second serves a
    /// busy partition better with a few hundred (README, Tail latency and CPUs).
    #[arg(long, env = "STRAND_GROUP_COMMIT_MIN_INTERVAL_US")]
    pub group_commit_min_interval_us: Option<u64>,
    /// A Produce whose answer is ready this many milliseconds or more after its request
    /// was read is logged at WARN with its timeline (handler, append, wait for the flush
    /// in flight, flush, answer; at most one line per shard per second). 0 = off.
    /// Default 1000.
    #[arg(long, env = "STRAND_PRODUCE_SLOW_LOG_MS")]
    pub produce_slow_log_ms: Option<u64>,
    /// Largest record batch accepted (`message.max.bytes`).
    #[arg(long, env = "STRAND_MESSAGE_MAX_BYTES")]
    pub message_max_bytes: Option<usize>,
    /// `compression.type` of topics that do not set it: `producer` (default: keep the
    /// producer's codec), `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd`.
    #[arg(long, env = "STRAND_COMPRESSION_TYPE")]
    pub compression_type: Option<String>,
    /// `message.timestamp.type` of topics that do not set it (Kafka's
    /// `log.message.timestamp.type`): `CreateTime` (default) or `LogAppendTime`.
    #[arg(long, env = "STRAND_LOG_MESSAGE_TIMESTAMP_TYPE")]
    pub log_message_timestamp_type: Option<String>,
    /// `min.insync.replicas` of topics that do not set it (default 1).
    #[arg(long, env = "STRAND_MIN_INSYNC_REPLICAS")]
    pub min_insync_replicas: Option<usize>,
    /// Partition replicas a node may host per shard (Redpanda's `topic_partitions_per_shard`).
    #[arg(long, env = "STRAND_TOPIC_PARTITIONS_PER_SHARD")]
    pub topic_partitions_per_shard: Option<usize>,
    /// Kafka connections the node serves at once (`max.connections`); more are closed
    /// right after accept, with a warning in the log.
    #[arg(long, env = "STRAND_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Kafka connections one client address may hold (`max.connections.per.ip`; default:
    /// max_connections).
    #[arg(long, env = "STRAND_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// Members one consumer group may hold (`group.max.size`).
    #[arg(long, env = "STRAND_GROUP_MAX_SIZE")]
    pub group_max_size: Option<usize>,
    /// Session timeout of consumer-protocol members, KIP-848
    /// (`group.consumer.session.timeout.ms`).
    #[arg(long, env = "STRAND_GROUP_CONSUMER_SESSION_TIMEOUT_MS")]
    pub group_consumer_session_timeout_ms: Option<u64>,
    /// Heartbeat interval told to consumer-protocol members, KIP-848
    /// (`group.consumer.heartbeat.interval.ms`).
    #[arg(long, env = "STRAND_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS")]
    pub group_consumer_heartbeat_interval_ms: Option<u64>,
    /// Serve share groups (KIP-932; Kafka 4.0's `group.share.enable`, 4.1's `share.version` feature): on by default (false neither advertises nor serves them).
    #[arg(long, env = "STRAND_GROUP_SHARE_ENABLE")]
    pub group_share_enable: Option<bool>,
    /// Session timeout of share-group members (`group.share.session.timeout.ms`).
    #[arg(long, env = "STRAND_GROUP_SHARE_SESSION_TIMEOUT_MS")]
    pub group_share_session_timeout_ms: Option<u64>,
    /// Heartbeat interval told to share-group members (`group.share.heartbeat.interval.ms`).
    #[arg(long, env = "STRAND_GROUP_SHARE_HEARTBEAT_INTERVAL_MS")]
    pub group_share_heartbeat_interval_ms: Option<u64>,
    /// How long a share-group member holds the records it was given before they go to another (`group.share.record.lock.duration.ms`).
    #[arg(long, env = "STRAND_GROUP_SHARE_RECORD_LOCK_DURATION_MS")]
    pub group_share_record_lock_duration_ms: Option<u64>,
    /// Deliveries of a record to share-group members before it is archived (`group.share.delivery.count.limit`).
    #[arg(long, env = "STRAND_GROUP_SHARE_DELIVERY_COUNT_LIMIT")]
    pub group_share_delivery_count_limit: Option<u64>,
    /// Members of one share group (`group.share.max.size`).
    #[arg(long, env = "STRAND_GROUP_SHARE_MAX_SIZE")]
    pub group_share_max_size: Option<usize>,
    /// Records of one share partition in flight, from its start offset (`group.share.partition.max.record.locks`).
    #[arg(long, env = "STRAND_GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS")]
    pub group_share_partition_max_record_locks: Option<u64>,
    /// Consumer groups one shard coordinates at most.
    #[arg(long, env = "STRAND_GROUPS_PER_SHARD")]
    pub groups_per_shard: Option<usize>,
    /// Request and answer bytes one shard holds in memory at once.
    #[arg(long, env = "STRAND_IN_FLIGHT_BYTES_PER_SHARD")]
    pub in_flight_bytes_per_shard: Option<usize>,
    /// Most record bytes in one Fetch response (`fetch.max.bytes`).
    #[arg(long, env = "STRAND_FETCH_MAX_BYTES")]
    pub fetch_max_bytes: Option<usize>,
    /// How often retention runs (`log.retention.check.interval.ms`).
    #[arg(long, env = "STRAND_RETENTION_CHECK_INTERVAL_MS")]
    pub retention_check_interval_ms: Option<u64>,
    /// How long the log cleaner sleeps when nothing is worth compacting
    /// (`log.cleaner.backoff.ms`).
    #[arg(long, env = "STRAND_LOG_CLEANER_BACKOFF_MS")]
    pub log_cleaner_backoff_ms: Option<u64>,
    /// The most bytes per second a shard's log cleaner reads plus writes (unlimited when
    /// unset; `log.cleaner.io.max.bytes.per.second`, per shard).
    #[arg(long, env = "STRAND_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
    pub log_cleaner_io_max_bytes_per_second: Option<u64>,
    /// The most bytes per second a shard's log cleaner reads plus writes while producers
    /// write on that shard (a flush within the last second); 0: no such cap. Strand's own
    /// setting; an idle shard cleans at `log_cleaner_io_max_bytes_per_second`.
    #[arg(long, env = "STRAND_LOG_CLEANER_IO_BUSY_MAX_BYTES_PER_SECOND")]
    pub log_cleaner_io_busy_max_bytes_per_second: Option<u64>,
    /// Log a warning with the shard's backtrace when one of its task queues keeps the CPU
    /// this many milliseconds past its quota (a stalled shard); off when unset.
    #[arg(long, env = "STRAND_STALL_REPORT_MS")]
    pub stall_report_ms: Option<u64>,
    /// How long committed offsets of an empty group (or, without group management, since
    /// their commit) are kept (`offsets.retention.minutes`).
    #[arg(long, env = "STRAND_OFFSETS_RETENTION_MINUTES")]
    pub offsets_retention_minutes: Option<u64>,
    /// `offsets_retention_minutes` in milliseconds; wins when both are set (for tests and
    /// short-lived development clusters).
    #[arg(long, env = "STRAND_OFFSETS_RETENTION_MS")]
    pub offsets_retention_ms: Option<u64>,
    /// How often committed offsets are checked for expiry
    /// (`offsets.retention.check.interval.ms`).
    #[arg(long, env = "STRAND_OFFSETS_RETENTION_CHECK_INTERVAL_MS")]
    pub offsets_retention_check_interval_ms: Option<u64>,
    /// Partitions of `__consumer_offsets` (`offsets.topic.num.partitions`), fixed at its
    /// creation.
    #[arg(long, env = "STRAND_OFFSETS_TOPIC_NUM_PARTITIONS")]
    pub offsets_topic_num_partitions: Option<usize>,
    /// Partitions of `__transaction_state` (`transaction.state.log.num.partitions`), fixed
    /// at its creation (when the first transactional producer looks up its coordinator).
    #[arg(long, env = "STRAND_TRANSACTION_STATE_NUM_PARTITIONS")]
    pub transaction_state_num_partitions: Option<usize>,
    /// Longest `transaction.timeout.ms` a producer may ask for (`transaction.max.timeout.ms`).
    #[arg(long, env = "STRAND_TRANSACTION_MAX_TIMEOUT_MS")]
    pub transaction_max_timeout_ms: Option<u64>,
    /// How often the coordinator aborts transactions that outlived their timeout
    /// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    #[arg(long, env = "STRAND_TRANSACTION_ABORT_CHECK_INTERVAL_MS")]
    pub transaction_abort_check_interval_ms: Option<u64>,
    /// File holding the bearer token the admin API's mutating endpoints require (default
    /// `<data_dir>/admin-token`, created with a random token when missing).
    #[arg(long, env = "STRAND_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// How long a transactional id with no transaction open and no request is kept before
    /// its coordinator forgets it (`transactional.id.expiration.ms`).
    #[arg(long, env = "STRAND_TRANSACTIONAL_ID_EXPIRATION_MS")]
    pub transactional_id_expiration_ms: Option<u64>,
    /// How often the coordinator looks for expired transactional ids
    /// (`transaction.remove.expired.transaction.cleanup.interval.ms`).
    #[arg(long, env = "STRAND_TRANSACTION_EXPIRY_CHECK_INTERVAL_MS")]
    pub transaction_expiry_check_interval_ms: Option<u64>,
    /// How long a new group waits for more members before its first rebalance completes
    /// (`group.initial.rebalance.delay.ms`).
    #[arg(long, env = "STRAND_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// Log level filter: a level (`debug`) or `tracing` directives
    /// (`strand_broker=debug,info`); changeable at run time with `PUT /v1/log-level`.
    #[arg(long, env = "STRAND_LOG")]
    pub log_level: Option<String>,
    /// Log line format.
    #[arg(long, env = "STRAND_LOG_FORMAT", value_enum)]
    pub log_format: Option<crate::common::logging::LogFormat>,
    /// Internal RPC listener (Raft traffic) of shard 0; shard s listens on port + s.
    #[arg(long, env = "STRAND_RPC_ADDR")]
    pub rpc_addr: Option<SocketAddr>,
    /// Controller voters, `id@host:port,...` (their RPC addresses). A node not among them
    /// joins through them and gets its id from the controller. Empty: a single node with
    /// no replication.
    #[arg(long, env = "STRAND_SEEDS")]
    pub seeds: Option<String>,
    /// Replication factor of topics created without one (and of `__consumer_offsets`).
    #[arg(long, env = "STRAND_DEFAULT_REPLICATION_FACTOR")]
    pub default_replication_factor: Option<i16>,
    /// Run the start-up checks only, print each finding with its fix, and exit (0 when
    /// all pass).
    #[arg(long)]
    pub check: bool,
}

/// Internal topic holding the groups' committed offsets and metadata (Kafka's name).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Internal topic holding the transaction coordinators' state (Kafka's name).
pub const TXN_STATE_TOPIC: &str = "__transaction_state";
/// Internal topic holding the share groups' delivery state (Kafka's name), compacted.
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";
/// Its partitions (Kafka's `share.coordinator.state.topic.num.partitions` default).
pub const SHARE_STATE_NUM_PARTITIONS: usize = 50;
/// Most partitions one topic may have (a bound on what a request can make us allocate).
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;
/// Default `topic_partitions_per_shard` (Redpanda's name and default): partition replicas
/// a node may host per shard. CreateTopics, CreatePartitions and auto-creation refuse what
/// would exceed it, before anything is allocated or proposed.
pub const TOPIC_PARTITIONS_PER_SHARD_DEFAULT: usize = 1000;
/// Default `max_connections` (Kafka: `max.connections`, unbounded there): Kafka connections
/// the node serves at once; each holds socket buffers and up to PIPELINE_DEPTH requests.
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;
/// Default `group_max_size` (Kafka: `group.max.size`, unbounded there): members and pending
/// member ids one consumer group may hold; a join beyond it gets GROUP_MAX_SIZE_REACHED.
pub const GROUP_MAX_SIZE_DEFAULT: usize = 10_000;
/// Default `group_consumer_session_timeout_ms` (Kafka's `group.consumer.session.timeout.ms`):
/// a consumer-protocol member not heard from for this long leaves the group.
pub const GROUP_CONSUMER_SESSION_TIMEOUT_MS_DEFAULT: u64 = 45_000;
/// Default `group_consumer_heartbeat_interval_ms` (Kafka's
/// `group.consumer.heartbeat.interval.ms`).
pub const GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 5_000;
/// Default `group_share_session_timeout_ms` (Kafka's `group.share.session.timeout.ms`).
pub const GROUP_SHARE_SESSION_TIMEOUT_MS_DEFAULT: u64 = 45_000;
/// Default `group_share_heartbeat_interval_ms` (Kafka's `group.share.heartbeat.interval.ms`).
pub const GROUP_SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 5_000;
/// Default `group_share_record_lock_duration_ms` (Kafka's
/// `group.share.record.lock.duration.ms`).
pub const GROUP_SHARE_RECORD_LOCK_DURATION_MS_DEFAULT: u64 = 30_000;
/// Default `group_share_delivery_count_limit` (Kafka's `group.share.delivery.count.limit`).
pub const GROUP_SHARE_DELIVERY_COUNT_LIMIT_DEFAULT: u64 = 5;
/// Default `group_share_max_size` (Kafka's `group.share.max.size`).
pub const GROUP_SHARE_MAX_SIZE_DEFAULT: usize = 200;
/// Default `group_share_partition_max_record_locks` (Kafka's
/// `group.share.partition.max.record.locks`).
pub const GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT: u64 = 2000;
/// Default `groups_per_shard` (Kafka has no such bound): consumer groups one shard
/// coordinates; a JoinGroup or OffsetCommit that would create one more gets
/// COORDINATOR_NOT_AVAILABLE (retriable: the client waits until groups expire or are
/// deleted). Groups loaded from `__consumer_offsets` are never refused.
pub const GROUPS_PER_SHARD_DEFAULT: usize = 100_000;
/// Default `in_flight_bytes_per_shard`: the bytes of requests read and not yet answered and
/// of answers not yet written that one shard holds at once; past it, its connections stop
/// reading and fetches answer with fewer records (`shard::budget`). A request larger than
/// the whole budget takes all of it.
pub const IN_FLIGHT_BYTES_PER_SHARD_DEFAULT: usize = 256 * 1024 * 1024;
/// Smallest `in_flight_bytes_per_shard` accepted.
pub const IN_FLIGHT_BYTES_PER_SHARD_MIN: usize = 1024 * 1024;
/// Default internal RPC port (shard 0).
pub const RPC_PORT_DEFAULT: u16 = 33145;
/// Largest replication factor (a Raft group of more voters costs more than it protects).
pub const REPLICATION_FACTOR_MAX: i16 = 5;
/// Most controller voters listed in `--seeds`.
pub const SEEDS_MAX: usize = 7;

/// Parses `id@host:port,...`: distinct positive ids and addresses.
pub fn parse_seeds(s: &str) -> anyhow::Result<Vec<(i32, SocketAddr)>> {
    let mut out: Vec<(i32, SocketAddr)> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| anyhow::anyhow!("seed '{item}' is not id@host:port"))?;
        let id: i32 = id
            .parse()
            .map_err(|_| anyhow::anyhow!("seed '{item}': node id '{id}' is not a number"))?;
        let addr: SocketAddr = addr
            .parse()
            .map_err(|_| anyhow::anyhow!("seed '{item}': '{addr}' is not ip:port"))?;
        if id < 1 || out.iter().any(|&(i, a)| i == id || a == addr) {
            bail!("seed '{item}': node ids must be >= 1 and ids and addresses distinct");
        }
        out.push((id, addr));
    }
    if out.len() > SEEDS_MAX {
        bail!(
            "at most {SEEDS_MAX} seeds (controller voters), got {}",
            out.len()
        );
    }
    out.sort();
    Ok(out)
}

/// The same keys in a TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    kafka_addr: Option<SocketAddr>,
    listeners: Option<String>,
    advertised_listeners: Option<String>,
    listener_security_protocol_map: Option<String>,
    inter_broker_listener_name: Option<String>,
    ssl_certificate_location: Option<PathBuf>,
    ssl_key_location: Option<PathBuf>,
    ssl_ca_location: Option<PathBuf>,
    ssl_client_auth: Option<ClientAuth>,
    ssl_principal_mapping_rules: Option<String>,
    rpc_tls_certificate_location: Option<PathBuf>,
    rpc_tls_key_location: Option<PathBuf>,
    rpc_tls_ca_location: Option<PathBuf>,
    sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    sasl_oauthbearer_expected_audience: Option<String>,
    sasl_oauthbearer_expected_issuer: Option<String>,
    sasl_oauthbearer_sub_claim_name: Option<String>,
    sasl_oauthbearer_scope_claim_name: Option<String>,
    sasl_oauthbearer_clock_skew_seconds: Option<u64>,
    authorizer_enabled: Option<bool>,
    super_users: Option<String>,
    allow_everyone_if_no_acl_found: Option<bool>,
    quota_window_num: Option<usize>,
    quota_window_size_seconds: Option<u64>,
    connections_max_reauth_ms: Option<u64>,
    admin_tls: Option<bool>,
    native_tls: Option<bool>,
    admin_addr: Option<SocketAddr>,
    native_addr: Option<SocketAddr>,
    native_shard_base_port: Option<u16>,
    advertised_host: Option<String>,
    smp: Option<usize>,
    node_id: Option<i32>,
    auto_create_topics: Option<bool>,
    num_partitions: Option<i32>,
    allow_buffered_io: Option<bool>,
    shared_device_flush: Option<bool>,
    segment_bytes: Option<u64>,
    group_commit_min_interval_us: Option<u64>,
    produce_slow_log_ms: Option<u64>,
    message_max_bytes: Option<usize>,
    compression_type: Option<String>,
    log_message_timestamp_type: Option<String>,
    min_insync_replicas: Option<usize>,
    fetch_max_bytes: Option<usize>,
    group_max_size: Option<usize>,
    group_consumer_session_timeout_ms: Option<u64>,
    group_consumer_heartbeat_interval_ms: Option<u64>,
    group_share_enable: Option<bool>,
    group_share_session_timeout_ms: Option<u64>,
    group_share_heartbeat_interval_ms: Option<u64>,
    group_share_record_lock_duration_ms: Option<u64>,
    group_share_delivery_count_limit: Option<u64>,
    group_share_max_size: Option<usize>,
    group_share_partition_max_record_locks: Option<u64>,
    groups_per_shard: Option<usize>,
    in_flight_bytes_per_shard: Option<usize>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    topic_partitions_per_shard: Option<usize>,
    retention_check_interval_ms: Option<u64>,
    log_cleaner_backoff_ms: Option<u64>,
    log_cleaner_io_max_bytes_per_second: Option<u64>,
    log_cleaner_io_busy_max_bytes_per_second: Option<u64>,
    stall_report_ms: Option<u64>,
    offsets_retention_minutes: Option<u64>,
    offsets_retention_ms: Option<u64>,
    offsets_retention_check_interval_ms: Option<u64>,
    offsets_topic_num_partitions: Option<usize>,
    transaction_state_num_partitions: Option<usize>,
    transaction_max_timeout_ms: Option<u64>,
    transaction_abort_check_interval_ms: Option<u64>,
    transactional_id_expiration_ms: Option<u64>,
    transaction_expiry_check_interval_ms: Option<u64>,
    admin_token_file: Option<PathBuf>,
    group_initial_rebalance_delay_ms: Option<u64>,
    log_level: Option<String>,
    log_format: Option<crate::common::logging::LogFormat>,
    rpc_addr: Option<SocketAddr>,
    seeds: Option<String>,
    default_replication_factor: Option<i16>,
}

/// Client certificates on TLS listeners (Kafka's `ssl.client.auth`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// Not asked for; every TLS client is `User:ANONYMOUS` (SSL) or its SASL user.
    #[default]
    None,
    /// Asked for; a client without one is served as `User:ANONYMOUS`.
    Requested,
    /// Required: a client without a valid one is refused in the handshake.
    Required,
}

/// TLS of the SSL and SASL_SSL listeners: PEM files, read at start and again when they
/// change (`security::tls`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SslConfig {
    /// Certificate chain, leaf first.
    pub certificate_location: Option<PathBuf>,
    /// Private key of the leaf.
    pub key_location: Option<PathBuf>,
    /// CAs that client certificates must chain to.
    pub ca_location: Option<PathBuf>,
    /// Client certificates asked for.
    pub client_auth: ClientAuth,
    /// `ssl.principal.mapping.rules` (default `DEFAULT`: the subject as RFC 2253 writes it).
    pub principal_mapping_rules: String,
}

/// SASL/OAUTHBEARER: where the JWK set is and how a token's claims are checked (Kafka's
/// `sasl.oauthbearer.*` broker settings; `security::jwt` applies them).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OAuthBearerConfig {
    /// The JWK set file.
    pub jwks_path: PathBuf,
    /// A token's `aud` must name one (unchecked when empty).
    pub expected_audience: Vec<String>,
    /// A token's `iss` must be this.
    pub expected_issuer: Option<String>,
    /// The claim naming the principal.
    pub sub_claim_name: String,
    /// The claim holding the scopes.
    pub scope_claim_name: String,
    /// Clock difference tolerated in `exp` and `nbf` checks.
    pub clock_skew_s: u64,
}

/// Default `sasl_oauthbearer_clock_skew_seconds` (Kafka's).
const OAUTHBEARER_CLOCK_SKEW_S_DEFAULT: u64 = 30;

impl OAuthBearerConfig {
    /// The JWK set at `jwks_path` with Kafka's defaults: no audience or issuer checked,
    /// the principal in `sub`, scopes in `scope`, 30 s of clock skew.
    pub fn new(jwks_path: PathBuf) -> OAuthBearerConfig {
        OAuthBearerConfig {
            jwks_path,
            expected_audience: Vec::new(),
            expected_issuer: None,
            sub_claim_name: "sub".into(),
            scope_claim_name: "scope".into(),
            clock_skew_s: OAUTHBEARER_CLOCK_SKEW_S_DEFAULT,
        }
    }
}

/// OAUTHBEARER's settings when `sasl_oauthbearer_jwks_endpoint_url` is set (the others
/// alone are an error).
fn oauthbearer_of(flags: &Flags, file: &FileConfig) -> anyhow::Result<Option<OAuthBearerConfig>> {
    let pick = |f: &Option<String>, c: &Option<String>| f.clone().or(c.clone());
    let url = pick(
        &flags.sasl_oauthbearer_jwks_endpoint_url,
        &file.sasl_oauthbearer_jwks_endpoint_url,
    );
    let audience = pick(
        &flags.sasl_oauthbearer_expected_audience,
        &file.sasl_oauthbearer_expected_audience,
    );
    let issuer = pick(
        &flags.sasl_oauthbearer_expected_issuer,
        &file.sasl_oauthbearer_expected_issuer,
    );
    let sub = pick(
        &flags.sasl_oauthbearer_sub_claim_name,
        &file.sasl_oauthbearer_sub_claim_name,
    );
    let scope = pick(
        &flags.sasl_oauthbearer_scope_claim_name,
        &file.sasl_oauthbearer_scope_claim_name,
    );
    let skew = flags
        .sasl_oauthbearer_clock_skew_seconds
        .or(file.sasl_oauthbearer_clock_skew_seconds);
    let Some(url) = url else {
        if audience.is_some()
            || issuer.is_some()
            || sub.is_some()
            || scope.is_some()
            || skew.is_some()
        {
            bail!("sasl_oauthbearer_* settings need sasl_oauthbearer_jwks_endpoint_url (the JWK set file)");
        }
        return Ok(None);
    };
    if url.starts_with("http://") || url.starts_with("https://") {
        bail!(
            "sasl_oauthbearer_jwks_endpoint_url {url}: fetching a JWK set over HTTP is not built; \
             keep the identity provider's JWK set in a file (e.g. refreshed by a timer with curl) \
             and name it (file:///path or a path): it is read again when it changes"
        );
    }
    let defaults =
        OAuthBearerConfig::new(PathBuf::from(url.strip_prefix("file://").unwrap_or(&url)));
    Ok(Some(OAuthBearerConfig {
        expected_audience: audience
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect(),
        expected_issuer: issuer.filter(|i| !i.is_empty()),
        sub_claim_name: sub.unwrap_or(defaults.sub_claim_name.clone()),
        scope_claim_name: scope.unwrap_or(defaults.scope_claim_name.clone()),
        clock_skew_s: skew.unwrap_or(defaults.clock_skew_s),
        ..defaults
    }))
}

/// Mutual TLS between nodes when `rpc_tls_*` are set: all three, or none.
fn rpc_tls_of(flags: &Flags, file: &FileConfig) -> anyhow::Result<Option<SslConfig>> {
    let files = (
        flags
            .rpc_tls_certificate_location
            .clone()
            .or(file.rpc_tls_certificate_location.clone()),
        flags
            .rpc_tls_key_location
            .clone()
            .or(file.rpc_tls_key_location.clone()),
        flags
            .rpc_tls_ca_location
            .clone()
            .or(file.rpc_tls_ca_location.clone()),
    );
    match files {
        (None, None, None) => Ok(None),
        (Some(cert), Some(key), Some(ca)) => Ok(Some(SslConfig {
            certificate_location: Some(cert),
            key_location: Some(key),
            ca_location: Some(ca),
            client_auth: ClientAuth::Required,
            principal_mapping_rules: "DEFAULT".into(),
        })),
        _ => bail!(
            "rpc_tls_certificate_location, rpc_tls_key_location and rpc_tls_ca_location go \
             together: set all three (tools/certs.sh makes a CA and a node certificate) or none"
        ),
    }
}

/// The listeners of `listeners` (or the one PLAINTEXT listener of `kafka_addr`), and the
/// index of the inter-broker one.
fn listeners_of(flags: &Flags, file: &FileConfig) -> anyhow::Result<(Vec<ListenerConfig>, usize)> {
    let kafka_addr = flags.kafka_addr.or(file.kafka_addr);
    let text = flags.listeners.clone().or(file.listeners.clone());
    let text = match (text, kafka_addr) {
        (Some(_), Some(_)) => {
            bail!("set listeners or kafka_addr, not both (kafka_addr is PLAINTEXT://<kafka_addr>)")
        }
        (Some(t), None) => t,
        (None, addr) => format!(
            "PLAINTEXT://{}",
            addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9092)))
        ),
    };
    let advertised_host = flags
        .advertised_host
        .clone()
        .or(file.advertised_host.clone());
    let listeners = crate::common::listeners::parse(
        &text,
        flags
            .advertised_listeners
            .as_deref()
            .or(file.advertised_listeners.as_deref()),
        flags
            .listener_security_protocol_map
            .as_deref()
            .or(file.listener_security_protocol_map.as_deref()),
        advertised_host.as_deref(),
    )?;
    let inter = match flags
        .inter_broker_listener_name
        .as_deref()
        .or(file.inter_broker_listener_name.as_deref())
    {
        Some(name) => listeners
            .iter()
            .position(|l| l.name.eq_ignore_ascii_case(name))
            .with_context(|| format!("inter_broker_listener_name {name} is not a listener"))?,
        None => listeners
            .iter()
            .position(|l| l.name == "PLAINTEXT")
            .unwrap_or(0),
    };
    Ok((listeners, inter))
}

/// Validated configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Config {
    /// Data directory.
    pub data_dir: PathBuf,
    /// The inter-broker Kafka listener's address (`inter_broker_listener_name`).
    pub kafka_addr: SocketAddr,
    /// Every Kafka listener; `inter_broker_listener` indexes the one other nodes use.
    pub listeners: Vec<ListenerConfig>,
    /// Index in `listeners` of the inter-broker listener.
    pub inter_broker_listener: usize,
    /// TLS of the SSL and SASL_SSL listeners.
    pub ssl: SslConfig,
    /// Mutual TLS between nodes (`rpc_tls_*`; client certificates always required).
    pub rpc_tls: Option<SslConfig>,
    /// SASL/OAUTHBEARER (`sasl_oauthbearer_*`), offered when a JWK set is configured.
    pub oauthbearer: Option<OAuthBearerConfig>,
    /// Requests are checked against the ACLs.
    pub authorizer_enabled: bool,
    /// `super.users`.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
    /// The admin API serves HTTPS.
    pub admin_tls: bool,
    /// The native listeners serve TLS.
    pub native_tls: bool,
    /// `connections.max.reauth.ms` (0: sessions do not end).
    pub connections_max_reauth_ms: u64,
    /// `quota.window.num`.
    pub quota_window_num: usize,
    /// `quota.window.size.seconds`.
    pub quota_window_size_seconds: u64,
    /// Admin HTTP listener.
    pub admin_addr: SocketAddr,
    /// Native handshake listener.
    pub native_addr: SocketAddr,
    /// First per-shard native port (0 = ephemeral).
    pub native_shard_base_port: u16,
    /// Host advertised for the inter-broker listener (this node's host).
    pub advertised_host: String,
    /// Shards requested (`None` = all CPUs in the affinity mask).
    pub smp: Option<usize>,
    /// Node id.
    pub node_id: i32,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// `num.partitions`.
    pub num_partitions: i32,
    /// Buffered I/O allowed.
    pub allow_buffered_io: bool,
    /// Partitions' flushes may share a device flush (`storage::device_flush`).
    pub shared_device_flush: bool,
    /// Default `segment.bytes`.
    pub segment_bytes: u64,
    /// Least microseconds between two flush starts of a partition (0: none).
    pub group_commit_min_interval_us: u64,
    /// Produce requests this slow or slower are logged with their timeline (0: none).
    pub produce_slow_log_ms: u64,
    /// `message.max.bytes`.
    pub message_max_bytes: usize,
    /// `compression.type` of topics that do not set it.
    pub compression_type: String,
    /// `message.timestamp.type` of topics that do not set it.
    pub log_message_timestamp_type: String,
    /// `min.insync.replicas` of topics that do not set it.
    pub min_insync_replicas: usize,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: usize,
    /// `group.max.size`.
    pub group_max_size: usize,
    /// `group.consumer.session.timeout.ms`.
    pub group_consumer_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms`.
    pub group_consumer_heartbeat_interval_ms: u64,
    /// Serve share groups (`group_share_enable`).
    pub group_share_enable: bool,
    /// Session timeout of share-group members (`group_share_session_timeout_ms`).
    pub group_share_session_timeout_ms: u64,
    /// Heartbeat interval told to share-group members (`group_share_heartbeat_interval_ms`).
    pub group_share_heartbeat_interval_ms: u64,
    /// How long a share-group member holds the records it was given before they go to another (`group_share_record_lock_duration_ms`).
    pub group_share_record_lock_duration_ms: u64,
    /// Deliveries of a record to share-group members before it is archived (`group_share_delivery_count_limit`).
    pub group_share_delivery_count_limit: u64,
    /// Members of one share group (`group_share_max_size`).
    pub group_share_max_size: usize,
    /// Records of one share partition in flight, from its start offset (`group_share_partition_max_record_locks`).
    pub group_share_partition_max_record_locks: u64,
    /// Consumer groups one shard coordinates (`GROUPS_PER_SHARD_DEFAULT`).
    pub groups_per_shard: usize,
    /// In-flight request and answer bytes per shard (`IN_FLIGHT_BYTES_PER_SHARD_DEFAULT`).
    pub in_flight_bytes_per_shard: usize,
    /// `max.connections`.
    pub max_connections: usize,
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: usize,
    /// Partition replicas a node may host per shard.
    pub topic_partitions_per_shard: usize,
    /// `log.retention.check.interval.ms`.
    pub retention_check_interval_ms: u64,
    /// `log.cleaner.backoff.ms`.
    pub log_cleaner_backoff_ms: u64,
    /// `log.cleaner.io.max.bytes.per.second` (per shard; `None`: unlimited).
    pub log_cleaner_io_max_bytes_per_second: Option<u64>,
    /// The cleaner's cap while producers write on its shard (0: none).
    pub log_cleaner_io_busy_max_bytes_per_second: u64,
    /// Overrun past the task quota reported as a shard stall (`None`: not watched).
    pub stall_report_ms: Option<u64>,
    /// `offsets.retention.minutes`, in milliseconds.
    pub offsets_retention_ms: u64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: u64,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_num_partitions: usize,
    /// `transaction.state.log.num.partitions`.
    pub transaction_state_num_partitions: usize,
    /// `transaction.max.timeout.ms`.
    pub transaction_max_timeout_ms: u64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub transaction_abort_check_interval_ms: u64,
    /// `transactional.id.expiration.ms`.
    pub transactional_id_expiration_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub transaction_expiry_check_interval_ms: u64,
    /// The file of the admin API's bearer token.
    pub admin_token_file: PathBuf,
    /// The admin API's bearer token: not a setting, read from `admin_token_file` when the
    /// broker starts (`start::run`); empty until then, which authorizes nothing.
    #[serde(skip)]
    pub admin_token: Secret,
    /// This node's incarnation (`cluster::incarnation`): not a setting, read from the data
    /// directory when a cluster node starts (`start::run`); 0 until then, and on a single
    /// node.
    #[serde(skip)]
    pub incarnation: u64,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: u64,
    /// Log level filter at start.
    pub log_level: String,
    /// Log line format.
    pub log_format: crate::common::logging::LogFormat,
    /// Internal RPC listener of shard 0 (shard s: port + s).
    pub rpc_addr: SocketAddr,
    /// Controller voters (node id, RPC address of shard 0); empty = single node.
    pub seeds: Vec<(i32, SocketAddr)>,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
}

impl Config {
    /// Merges flags (with environment) over the file over defaults, and validates.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn load(flags: Flags) -> anyhow::Result<Config> {
        let file = match &flags.config {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let (listeners, inter_broker_listener) = listeners_of(&flags, &file)?;
        let rpc_tls = rpc_tls_of(&flags, &file)?;
        let oauthbearer = oauthbearer_of(&flags, &file)?;
        let data_dir = flags
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("data"));
        let inter = &listeners[inter_broker_listener];
        let c = Config {
            data_dir: data_dir.clone(),
            advertised_host: inter.advertised_host.clone(),
            kafka_addr: inter.addr,
            ssl: SslConfig {
                certificate_location: flags
                    .ssl_certificate_location
                    .clone()
                    .or(file.ssl_certificate_location.clone()),
                key_location: flags
                    .ssl_key_location
                    .clone()
                    .or(file.ssl_key_location.clone()),
                ca_location: flags
                    .ssl_ca_location
                    .clone()
                    .or(file.ssl_ca_location.clone()),
                client_auth: flags
                    .ssl_client_auth
                    .or(file.ssl_client_auth)
                    .unwrap_or_default(),
                principal_mapping_rules: flags
                    .ssl_principal_mapping_rules
                    .clone()
                    .or(file.ssl_principal_mapping_rules.clone())
                    .unwrap_or_else(|| "DEFAULT".to_string()),
            },
            rpc_tls,
            oauthbearer,
            listeners,
            inter_broker_listener,
            authorizer_enabled: flags
                .authorizer_enabled
                .or(file.authorizer_enabled)
                .unwrap_or(false),
            super_users: flags
                .super_users
                .clone()
                .or(file.super_users.clone())
                .unwrap_or_default()
                .split(';')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect(),
            allow_everyone_if_no_acl_found: flags
                .allow_everyone_if_no_acl_found
                .or(file.allow_everyone_if_no_acl_found)
                .unwrap_or(false),
            admin_tls: flags.admin_tls.or(file.admin_tls).unwrap_or(false),
            native_tls: flags.native_tls.or(file.native_tls).unwrap_or(false),
            connections_max_reauth_ms: flags
                .connections_max_reauth_ms
                .or(file.connections_max_reauth_ms)
                .unwrap_or(0),
            quota_window_num: flags
                .quota_window_num
                .or(file.quota_window_num)
                .unwrap_or(QUOTA_WINDOW_NUM_DEFAULT),
            quota_window_size_seconds: flags
                .quota_window_size_seconds
                .or(file.quota_window_size_seconds)
                .unwrap_or(QUOTA_WINDOW_SIZE_SECONDS_DEFAULT),
            admin_addr: flags
                .admin_addr
                .or(file.admin_addr)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9644))),
            native_addr: flags
                .native_addr
                .or(file.native_addr)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], NATIVE_PORT_DEFAULT))),
            native_shard_base_port: flags
                .native_shard_base_port
                .or(file.native_shard_base_port)
                .unwrap_or(NATIVE_SHARD_BASE_PORT_DEFAULT),
            smp: flags.smp.or(file.smp),
            node_id: flags.node_id.or(file.node_id).unwrap_or(0),
            auto_create_topics: flags
                .auto_create_topics
                .or(file.auto_create_topics)
                .unwrap_or(true),
            num_partitions: flags.num_partitions.or(file.num_partitions).unwrap_or(1),
            allow_buffered_io: flags
                .allow_buffered_io
                .or(file.allow_buffered_io)
                .unwrap_or(false),
            shared_device_flush: flags
                .shared_device_flush
                .or(file.shared_device_flush)
                .unwrap_or(true),
            segment_bytes: flags
                .segment_bytes
                .or(file.segment_bytes)
                .unwrap_or(strand_storage::config::SEGMENT_BYTES_DEFAULT),
            group_commit_min_interval_us: flags
                .group_commit_min_interval_us
                .or(file.group_commit_min_interval_us)
                .unwrap_or(0),
            produce_slow_log_ms: flags
                .produce_slow_log_ms
                .or(file.produce_slow_log_ms)
                .unwrap_or(PRODUCE_SLOW_LOG_MS_DEFAULT),
            message_max_bytes: flags
                .message_max_bytes
                .or(file.message_max_bytes)
                .unwrap_or(MESSAGE_MAX_BYTES_DEFAULT),
            compression_type: flags
                .compression_type
                .clone()
                .or(file.compression_type.clone())
                .unwrap_or_else(|| COMPRESSION_TYPE_DEFAULT.to_string()),
            log_message_timestamp_type: flags
                .log_message_timestamp_type
                .clone()
                .or(file.log_message_timestamp_type.clone())
                .unwrap_or_else(|| MESSAGE_TIMESTAMP_TYPE_DEFAULT.to_string()),
            min_insync_replicas: flags
                .min_insync_replicas
                .or(file.min_insync_replicas)
                .unwrap_or(1),
            fetch_max_bytes: flags
                .fetch_max_bytes
                .or(file.fetch_max_bytes)
                .unwrap_or(FETCH_MAX_BYTES_DEFAULT),
            group_max_size: flags
                .group_max_size
                .or(file.group_max_size)
                .unwrap_or(GROUP_MAX_SIZE_DEFAULT),
            group_consumer_session_timeout_ms: flags
                .group_consumer_session_timeout_ms
                .or(file.group_consumer_session_timeout_ms)
                .unwrap_or(GROUP_CONSUMER_SESSION_TIMEOUT_MS_DEFAULT),
            group_consumer_heartbeat_interval_ms: flags
                .group_consumer_heartbeat_interval_ms
                .or(file.group_consumer_heartbeat_interval_ms)
                .unwrap_or(GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS_DEFAULT),
            group_share_enable: flags
                .group_share_enable
                .or(file.group_share_enable)
                .unwrap_or(true),
            group_share_session_timeout_ms: flags
                .group_share_session_timeout_ms
                .or(file.group_share_session_timeout_ms)
                .unwrap_or(GROUP_SHARE_SESSION_TIMEOUT_MS_DEFAULT),
            group_share_heartbeat_interval_ms: flags
                .group_share_heartbeat_interval_ms
                .or(file.group_share_heartbeat_interval_ms)
                .unwrap_or(GROUP_SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT),
            group_share_record_lock_duration_ms: flags
                .group_share_record_lock_duration_ms
                .or(file.group_share_record_lock_duration_ms)
                .unwrap_or(GROUP_SHARE_RECORD_LOCK_DURATION_MS_DEFAULT),
            group_share_delivery_count_limit: flags
                .group_share_delivery_count_limit
                .or(file.group_share_delivery_count_limit)
                .unwrap_or(GROUP_SHARE_DELIVERY_COUNT_LIMIT_DEFAULT),
            group_share_max_size: flags
                .group_share_max_size
                .or(file.group_share_max_size)
                .unwrap_or(GROUP_SHARE_MAX_SIZE_DEFAULT),
            group_share_partition_max_record_locks: flags
                .group_share_partition_max_record_locks
                .or(file.group_share_partition_max_record_locks)
                .unwrap_or(GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT),
            groups_per_shard: flags
                .groups_per_shard
                .or(file.groups_per_shard)
                .unwrap_or(GROUPS_PER_SHARD_DEFAULT),
            in_flight_bytes_per_shard: flags
                .in_flight_bytes_per_shard
                .or(file.in_flight_bytes_per_shard)
                .unwrap_or(IN_FLIGHT_BYTES_PER_SHARD_DEFAULT),
            max_connections: flags
                .max_connections
                .or(file.max_connections)
                .unwrap_or(MAX_CONNECTIONS_DEFAULT),
            max_connections_per_ip: flags
                .max_connections_per_ip
                .or(file.max_connections_per_ip)
                .or(flags.max_connections.or(file.max_connections))
                .unwrap_or(MAX_CONNECTIONS_DEFAULT),
            topic_partitions_per_shard: flags
                .topic_partitions_per_shard
                .or(file.topic_partitions_per_shard)
                .unwrap_or(TOPIC_PARTITIONS_PER_SHARD_DEFAULT),
            retention_check_interval_ms: flags
                .retention_check_interval_ms
                .or(file.retention_check_interval_ms)
                .unwrap_or(RETENTION_CHECK_INTERVAL_MS_DEFAULT),
            log_cleaner_backoff_ms: flags
                .log_cleaner_backoff_ms
                .or(file.log_cleaner_backoff_ms)
                .unwrap_or(LOG_CLEANER_BACKOFF_MS_DEFAULT),
            log_cleaner_io_max_bytes_per_second: flags
                .log_cleaner_io_max_bytes_per_second
                .or(file.log_cleaner_io_max_bytes_per_second),
            log_cleaner_io_busy_max_bytes_per_second: flags
                .log_cleaner_io_busy_max_bytes_per_second
                .or(file.log_cleaner_io_busy_max_bytes_per_second)
                .unwrap_or(LOG_CLEANER_IO_BUSY_MAX_BYTES_PER_SECOND_DEFAULT),
            stall_report_ms: flags.stall_report_ms.or(file.stall_report_ms),
            offsets_retention_ms: flags
                .offsets_retention_ms
                .or(file.offsets_retention_ms)
                .unwrap_or_else(|| {
                    flags
                        .offsets_retention_minutes
                        .or(file.offsets_retention_minutes)
                        .unwrap_or(OFFSETS_RETENTION_MINUTES_DEFAULT)
                        .saturating_mul(60_000)
                }),
            offsets_retention_check_interval_ms: flags
                .offsets_retention_check_interval_ms
                .or(file.offsets_retention_check_interval_ms)
                .unwrap_or(OFFSETS_RETENTION_CHECK_INTERVAL_MS_DEFAULT),
            offsets_topic_num_partitions: flags
                .offsets_topic_num_partitions
                .or(file.offsets_topic_num_partitions)
                .unwrap_or(50),
            transaction_state_num_partitions: flags
                .transaction_state_num_partitions
                .or(file.transaction_state_num_partitions)
                .unwrap_or(TRANSACTION_STATE_NUM_PARTITIONS_DEFAULT),
            transaction_max_timeout_ms: flags
                .transaction_max_timeout_ms
                .or(file.transaction_max_timeout_ms)
                .unwrap_or(TRANSACTION_MAX_TIMEOUT_MS_DEFAULT),
            transaction_abort_check_interval_ms: flags
                .transaction_abort_check_interval_ms
                .or(file.transaction_abort_check_interval_ms)
                .unwrap_or(TRANSACTION_ABORT_CHECK_INTERVAL_MS_DEFAULT),
            transactional_id_expiration_ms: flags
                .transactional_id_expiration_ms
                .or(file.transactional_id_expiration_ms)
                .unwrap_or(TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT),
            transaction_expiry_check_interval_ms: flags
                .transaction_expiry_check_interval_ms
                .or(file.transaction_expiry_check_interval_ms)
                .unwrap_or(TRANSACTION_EXPIRY_CHECK_INTERVAL_MS_DEFAULT),
            admin_token_file: flags
                .admin_token_file
                .or(file.admin_token_file)
                .unwrap_or_else(|| data_dir.join(ADMIN_TOKEN_FILE_NAME)),
            admin_token: Secret::default(),
            incarnation: 0,
            group_initial_rebalance_delay_ms: flags
                .group_initial_rebalance_delay_ms
                .or(file.group_initial_rebalance_delay_ms)
                .unwrap_or(3000),
            log_level: flags
                .log_level
                .or(file.log_level)
                .unwrap_or_else(|| crate::common::logging::LOG_LEVEL_DEFAULT.to_string()),
            log_format: flags.log_format.or(file.log_format).unwrap_or_default(),
            rpc_addr: flags
                .rpc_addr
                .or(file.rpc_addr)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], RPC_PORT_DEFAULT))),
            seeds: parse_seeds(flags.seeds.or(file.seeds).as_deref().unwrap_or(""))?,
            default_replication_factor: flags
                .default_replication_factor
                .or(file.default_replication_factor)
                .unwrap_or(1),
        };
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.validate_share()?;
        // A node not among the seeds (or with no --node-id) joins through them and gets
        // its id from the controller (`cluster::join`).
        let nodes = self.seeds.len().max(1);
        if !(1..=REPLICATION_FACTOR_MAX).contains(&self.default_replication_factor)
            || self.default_replication_factor as usize > nodes
        {
            bail!(
                "default_replication_factor must be in 1..={} (the nodes in --seeds), got {}",
                nodes.min(REPLICATION_FACTOR_MAX as usize),
                self.default_replication_factor
            );
        }
        if self.smp == Some(0) {
            bail!("smp must be at least 1");
        }
        self.validate_listeners()?;
        if self.node_id < 0 {
            bail!("node_id must be >= 0, got {}", self.node_id);
        }
        if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&self.num_partitions) {
            bail!(
                "num_partitions must be in 1..=10000, got {}",
                self.num_partitions
            );
        }
        if self.segment_bytes < strand_storage::config::SEGMENT_BYTES_MIN {
            bail!(
                "segment_bytes must be at least {}",
                strand_storage::config::SEGMENT_BYTES_MIN
            );
        }
        if self.group_commit_min_interval_us > strand_storage::config::FLUSH_MIN_INTERVAL_US_MAX {
            bail!(
                "group_commit_min_interval_us must be at most {}",
                strand_storage::config::FLUSH_MIN_INTERVAL_US_MAX
            );
        }
        if !(1..=1000).contains(&self.offsets_topic_num_partitions) {
            bail!("offsets_topic_num_partitions must be in 1..=1000");
        }
        if !(1..=1000).contains(&self.transaction_state_num_partitions) {
            bail!("transaction_state_num_partitions must be in 1..=1000");
        }
        if !(1..=i32::MAX as u64).contains(&self.transaction_max_timeout_ms) {
            bail!("transaction_max_timeout_ms must be in 1..={}", i32::MAX);
        }
        if self.group_initial_rebalance_delay_ms > 300_000 {
            bail!("group_initial_rebalance_delay_ms must be at most 300000");
        }
        if self.native_shard_base_port != 0 {
            let last = usize::from(self.native_shard_base_port) + self.smp.unwrap_or(1) - 1;
            if last > usize::from(u16::MAX) {
                bail!("native_shard_base_port + smp - 1 must be a port (<= 65535), got {last}");
            }
        }
        crate::common::logging::parse_filter(&self.log_level).context("log_level")?;
        self.validate_topic_defaults()?;
        self.validate_limits()
    }

    /// On a cluster: the inter-broker listener is one the nodes can authenticate on, and
    /// the authorizer lets their own requests (transaction markers) through.
    fn validate_inter_broker_listener(&self) -> anyhow::Result<()> {
        let inter = &self.listeners[self.inter_broker_listener];
        match inter.protocol {
            SecurityProtocol::Plaintext => {
                if self.authorizer_enabled
                    && !self.super_users.iter().any(|u| u == "User:ANONYMOUS")
                {
                    bail!(
                        "with authorizer_enabled on a cluster, the nodes' own requests (transaction \
                         markers) come unauthenticated over the PLAINTEXT inter-broker listener: add \
                         User:ANONYMOUS to super_users and keep that listener on a private network, \
                         or make the inter-broker listener SSL (see rpc_tls_*)"
                    );
                }
            }
            SecurityProtocol::Ssl => {
                if self.rpc_tls.is_none()
                    || self.ssl.client_auth != ClientAuth::Required
                    || self.ssl.ca_location.is_none()
                {
                    bail!(
                        "an SSL inter-broker listener ({}) needs the nodes' certificates: set \
                         rpc_tls_* (each node presents its node certificate, which must chain to \
                         ssl_ca_location) and ssl_client_auth required",
                        inter.name
                    );
                }
            }
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => bail!(
                "the inter-broker listener ({}) cannot be SASL: nodes have no SASL credentials; \
                 use an SSL listener with rpc_tls_* (mutual TLS) or a PLAINTEXT one on a private \
                 network",
                inter.name
            ),
        }
        Ok(())
    }

    /// The checks of the listeners against TLS settings and the other addresses.
    fn validate_listeners(&self) -> anyhow::Result<()> {
        let tls =
            self.admin_tls || self.native_tls || self.listeners.iter().any(|l| l.protocol.tls());
        if tls && (self.ssl.certificate_location.is_none() || self.ssl.key_location.is_none()) {
            bail!(
                "an SSL or SASL_SSL listener (or admin_tls, native_tls) needs ssl_certificate_location and ssl_key_location \
                 (PEM files; tools/certs.sh makes a test CA and certificates)"
            );
        }
        if self.ssl.client_auth != ClientAuth::None && self.ssl.ca_location.is_none() {
            bail!(
                "ssl_client_auth {:?} needs ssl_ca_location (the CA of the client certificates)",
                self.ssl.client_auth
            );
        }
        if !(2..=100).contains(&self.quota_window_num)
            || !(1..=3600).contains(&self.quota_window_size_seconds)
        {
            bail!("quota_window_num must be in 2..=100 and quota_window_size_seconds in 1..=3600");
        }
        if let Some(bad) = self.super_users.iter().find(|u| !u.contains(':')) {
            bail!("super_users: '{bad}' is not Type:name (e.g. User:admin; separate with ';')");
        }
        if !self.seeds.is_empty() {
            self.validate_inter_broker_listener()?;
        }
        for l in &self.listeners {
            for (what, addr) in [
                ("admin_addr", self.admin_addr),
                ("native_addr", self.native_addr),
                ("rpc_addr", self.rpc_addr),
            ] {
                if l.addr.port() == addr.port()
                    && (l.addr.ip() == addr.ip()
                        || l.addr.ip().is_unspecified()
                        || addr.ip().is_unspecified())
                {
                    bail!(
                        "listener {} ({}) and {what} ({addr}) are the same address",
                        l.name,
                        l.addr
                    );
                }
            }
        }
        Ok(())
    }

    /// The checks of the share-group settings (Kafka's bounds).
    fn validate_share(&self) -> anyhow::Result<()> {
        if self.group_share_heartbeat_interval_ms >= self.group_share_session_timeout_ms {
            bail!(
                "group_share_heartbeat_interval_ms ({}) must be below group_share_session_timeout_ms ({})",
                self.group_share_heartbeat_interval_ms,
                self.group_share_session_timeout_ms
            );
        }
        if !(2..=10).contains(&self.group_share_delivery_count_limit) {
            bail!("group_share_delivery_count_limit must be in 2..=10 (Kafka's bounds)");
        }
        if !(100..=10_000).contains(&self.group_share_partition_max_record_locks) {
            bail!("group_share_partition_max_record_locks must be in 100..=10000 (Kafka's bounds)");
        }
        if !(1_000..=3_600_000).contains(&self.group_share_record_lock_duration_ms) {
            bail!("group_share_record_lock_duration_ms must be in 1000..=3600000 (Kafka's bounds)");
        }
        for (name, v) in [
            (
                "group_share_session_timeout_ms",
                self.group_share_session_timeout_ms,
            ),
            (
                "group_share_heartbeat_interval_ms",
                self.group_share_heartbeat_interval_ms,
            ),
            ("group_share_max_size", self.group_share_max_size as u64),
        ] {
            if v == 0 {
                bail!("{name} must be positive");
            }
        }
        Ok(())
    }

    /// The broker's defaults of topic configs: values Kafka accepts.
    fn validate_topic_defaults(&self) -> anyhow::Result<()> {
        if !COMPRESSION_TYPES.contains(&self.compression_type.as_str()) {
            bail!(
                "compression_type must be one of {}, got '{}'",
                COMPRESSION_TYPES.join(", "),
                self.compression_type
            );
        }
        if !MESSAGE_TIMESTAMP_TYPES.contains(&self.log_message_timestamp_type.as_str()) {
            bail!(
                "log_message_timestamp_type must be one of {}, got '{}'",
                MESSAGE_TIMESTAMP_TYPES.join(", "),
                self.log_message_timestamp_type
            );
        }
        if self.min_insync_replicas == 0 {
            bail!("min_insync_replicas must be at least 1");
        }
        Ok(())
    }

    /// The checks of sizes, counts and intervals.
    fn validate_limits(&self) -> anyhow::Result<()> {
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms {
            bail!(
                "group_consumer_heartbeat_interval_ms ({}) must be below group_consumer_session_timeout_ms ({})",
                self.group_consumer_heartbeat_interval_ms,
                self.group_consumer_session_timeout_ms
            );
        }
        if self.message_max_bytes == 0 || self.message_max_bytes > strand_wire::BATCH_BYTES_MAX {
            bail!(
                "message_max_bytes must be in 1..={}",
                strand_wire::BATCH_BYTES_MAX
            );
        }
        for (name, n) in [
            (
                "retention_check_interval_ms",
                self.retention_check_interval_ms,
            ),
            ("log_cleaner_backoff_ms", self.log_cleaner_backoff_ms),
            (
                "log_cleaner_io_max_bytes_per_second",
                self.log_cleaner_io_max_bytes_per_second.unwrap_or(1),
            ),
            ("stall_report_ms", self.stall_report_ms.unwrap_or(1)),
            ("offsets_retention_ms", self.offsets_retention_ms),
            (
                "offsets_retention_check_interval_ms",
                self.offsets_retention_check_interval_ms,
            ),
            (
                "transaction_abort_check_interval_ms",
                self.transaction_abort_check_interval_ms,
            ),
            (
                "transactional_id_expiration_ms",
                self.transactional_id_expiration_ms,
            ),
            (
                "transaction_expiry_check_interval_ms",
                self.transaction_expiry_check_interval_ms,
            ),
            ("group_max_size", self.group_max_size as u64),
            (
                "group_consumer_session_timeout_ms",
                self.group_consumer_session_timeout_ms,
            ),
            (
                "group_consumer_heartbeat_interval_ms",
                self.group_consumer_heartbeat_interval_ms,
            ),
            ("groups_per_shard", self.groups_per_shard as u64),
            (
                "topic_partitions_per_shard",
                self.topic_partitions_per_shard as u64,
            ),
        ] {
            if n == 0 {
                bail!("{name} must be positive");
            }
        }
        if self.in_flight_bytes_per_shard < IN_FLIGHT_BYTES_PER_SHARD_MIN {
            bail!("in_flight_bytes_per_shard must be at least {IN_FLIGHT_BYTES_PER_SHARD_MIN}");
        }
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            bail!("max_connections and max_connections_per_ip must be positive");
        }
        if self.fetch_max_bytes == 0 || self.fetch_max_bytes > REQUEST_BYTES_MAX {
            bail!("fetch_max_bytes must be in 1..={REQUEST_BYTES_MAX}");
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// deploy/strand.toml, the documented config file (`make install` installs it).
    const DEPLOY_TOML: &str = include_str!("../../../deploy/strand.toml");
    /// Keys whose value in deploy/strand.toml is a deployment choice, not the default.
    const DEPLOY_OVERRIDES: &[&str] = &["data_dir", "admin_token_file"];

    #[test]
    fn deploy_config_lists_every_option_with_its_default() {
        use clap::CommandFactory;
        let keys: Vec<String> = Flags::command()
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "config" | "check" | "help" | "version"))
            .map(|l| l.replace('-', "_"))
            .collect();
        assert!(keys.len() >= 16, "{keys:?}");
        for key in &keys {
            let listed = DEPLOY_TOML.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            assert!(listed, "deploy/strand.toml does not document `{key}`");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("strand.toml");
        std::fs::write(&f, DEPLOY_TOML).expect("write");
        let deployed = Config::load(Flags {
            config: Some(f),
            ..Flags::default()
        })
        .expect("deploy/strand.toml loads");
        let defaults = Config::load(Flags::default()).expect("defaults load");
        let (deployed, defaults) = (
            serde_json::to_value(&deployed).expect("json"),
            serde_json::to_value(&defaults).expect("json"),
        );
        for key in &keys {
            if DEPLOY_OVERRIDES.contains(&key.as_str()) {
                continue;
            }
            assert_eq!(
                deployed.get(key),
                defaults.get(key),
                "deploy/strand.toml's `{key}` is not the default"
            );
        }
        assert_eq!(deployed["data_dir"], "/var/lib/strand");
    }

    #[test]
    fn flags_override_file_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("strand.toml");
        std::fs::write(&f, "num_partitions = 3\nnode_id = 4\n").expect("write");
        let flags = Flags {
            config: Some(f.clone()),
            node_id: Some(9),
            ..Flags::default()
        };
        let c = Config::load(flags).expect("valid");
        assert_eq!((c.num_partitions, c.node_id), (3, 9));
        std::fs::write(&f, "nonsense = 1\n").expect("write");
        let err = Config::load(Flags {
            config: Some(f),
            ..Flags::default()
        })
        .expect_err("refused");
        assert!(format!("{err:#}").contains("nonsense"), "{err:#}");
        let err = Config::load(Flags {
            smp: Some(0),
            ..Flags::default()
        })
        .expect_err("refused");
        assert!(err.to_string().contains("smp"));
    }

    #[test]
    fn a_cluster_inter_broker_listener_is_plaintext_or_mutual_tls_never_sasl() {
        let cluster = |listener: &str, extra: Flags| {
            let name = listener.split(':').next().unwrap_or_default().to_string();
            Config::load(Flags {
                node_id: Some(1),
                seeds: Some("1@127.0.0.1:19100".into()),
                listeners: Some(listener.into()),
                inter_broker_listener_name: Some(name),
                listener_security_protocol_map: Some(
                    "INTERNAL:SSL,SASLI:SASL_PLAINTEXT,PLAINI:PLAINTEXT".into(),
                ),
                ssl_certificate_location: Some("node.pem".into()),
                ssl_key_location: Some("node.key".into()),
                ..extra
            })
        };
        let ssl = "INTERNAL://127.0.0.1:19093";
        let err = cluster(ssl, Flags::default()).expect_err("no node certificates");
        assert!(err.to_string().contains("rpc_tls_"), "{err}");
        let with_nodes = Flags {
            rpc_tls_certificate_location: Some("node.pem".into()),
            rpc_tls_key_location: Some("node.key".into()),
            rpc_tls_ca_location: Some("ca.pem".into()),
            ssl_ca_location: Some("ca.pem".into()),
            ssl_client_auth: Some(ClientAuth::Required),
            ..Flags::default()
        };
        assert!(cluster(ssl, with_nodes).is_ok());
        let sasl = cluster("SASLI://127.0.0.1:19094", Flags::default());
        assert!(sasl
            .expect_err("sasl")
            .to_string()
            .contains("cannot be SASL"));
        let plain = cluster(
            "PLAINI://127.0.0.1:19095",
            Flags {
                authorizer_enabled: Some(true),
                ..Flags::default()
            },
        );
        assert!(plain
            .expect_err("anonymous")
            .to_string()
            .contains("User:ANONYMOUS"));
    }
}
