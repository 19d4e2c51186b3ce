//! The command line: every subcommand and flag of `strandctl` (clap derive), and the exit
//! codes it documents.
//!
//! Invariant: this module only describes and parses; it does no I/O. Every value a
//! command needs is parsed here into a typed field (offsets, `k=v` pairs, sizes), so
//! a bad flag is a usage error (exit 2) before anything is sent.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// The exit codes, as printed by `--help` (keep in sync with `main::ExitCode` users).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  error talking to the broker or the admin API, or an I/O error
  2  usage error (bad flag or argument)
  3  a check found problems: cluster health not ready, tune check found settings to
     change, config validate found bad keys, self-test WARN with --strict
  4  refused: the broker said no for the current state (e.g. reset-offsets on a group
     with active members, a topic that already exists)

Environment: STRANDCTL_BROKERS (--brokers), STRANDCTL_ADMIN (--admin).";

/// Default Kafka address: a broker started with `make run`.
pub const BROKERS_DEFAULT: &str = "127.0.0.1:9092";
/// Default admin HTTP address (ARCHITECTURE.md: port 9644).
pub const ADMIN_DEFAULT: &str = "127.0.0.1:9644";

#[derive(Parser, Debug)]
#[command(
    name = "strandctl",
    version,
    about = "Manage and check a Strand cluster (or any Kafka broker)",
    after_help = EXIT_CODES_HELP,
    propagate_version = true
)]
pub struct Cli {
    /// Kafka address of a broker (HOST:PORT).
    #[arg(long, global = true, env = "STRANDCTL_BROKERS", default_value = BROKERS_DEFAULT)]
    pub brokers: String,
    /// Admin HTTP address of a broker (HOST:PORT).
    #[arg(long, global = true, env = "STRANDCTL_ADMIN", default_value = ADMIN_DEFAULT)]
    pub admin: String,
    /// Socket timeout for each request, in milliseconds.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Client security settings, as Kafka's tools take them (`security.protocol`,
    /// `sasl.mechanism`, `sasl.username`/`sasl.password` or `sasl.jaas.config`,
    /// `ssl.ca.location`, `ssl.certificate.location`/`ssl.key.location`).
    #[arg(long, global = true, env = "STRANDCTL_COMMAND_CONFIG")]
    pub command_config: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, list, describe, change and delete topics.
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Topic(TopicCmd),
    /// List, describe, delete consumer groups and reset their offsets.
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Group(GroupCmd),
    /// List and describe transactions, the producers of a partition, and abort a hanging
    /// transaction (like `kafka-transactions.sh`).
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Transactions(TransactionsCmd),
    /// SCRAM users: list, describe, set a credential (password on stdin), delete one
    /// (like `kafka-configs.sh --entity-type users` for SCRAM).
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    User(UserCmd),
    /// ACLs: list, add, remove (like `kafka-acls.sh`; the broker needs authorizer_enabled).
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Acl(AclCmd),
    /// Client quotas: list, set, remove (like `kafka-configs.sh` for quotas).
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Quota(QuotaCmd),
    /// Produce records read from stdin, one per line.
    #[command(after_help = EXIT_CODES_HELP)]
    Produce(ProduceArgs),
    /// Print records of a topic.
    #[command(after_help = EXIT_CODES_HELP)]
    Consume(ConsumeArgs),
    /// Cluster metadata and health.
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Cluster(ClusterCmd),
    /// Dynamic broker configs of a node or the cluster default (like `kafka-configs.sh
    /// --entity-type brokers`).
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Broker(BrokerCmd),
    /// Strand configuration files.
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Config(ConfigCmd),
    /// Measure this machine's disk and the network path to the broker, with PASS/WARN.
    #[command(after_help = EXIT_CODES_HELP)]
    SelfTest(SelfTestArgs),
    /// Check (and optionally apply) the host settings Strand's design relies on.
    #[command(subcommand, after_help = EXIT_CODES_HELP)]
    Tune(TuneCmd),
    /// Print a shell completion script (e.g. `strandctl completions bash > /etc/bash_completion.d/strandctl`).
    Completions {
        /// Shell.
        shell: clap_complete::Shell,
    },
}

/// `topic ...`
#[derive(Subcommand, Debug)]
pub enum TopicCmd {
    /// Create a topic.
    Create {
        /// Topic name.
        name: String,
        /// Number of partitions.
        #[arg(short, long, default_value_t = 1)]
        partitions: i32,
        /// Replication factor (-1: the broker's default.replication.factor).
        #[arg(short, long, default_value_t = -1, allow_negative_numbers = true)]
        replication_factor: i16,
        /// Topic config KEY=VALUE (repeatable), e.g. `-c retention.ms=3600000`.
        #[arg(short, long = "config", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
    },
    /// List topics.
    List {
        /// Include internal topics (`__consumer_offsets`).
        #[arg(long)]
        internal: bool,
    },
    /// Show a topic's partitions, leaders, replicas and non-default configs.
    Describe {
        /// Topic name.
        name: String,
        /// Show every config, not only those set on the topic.
        #[arg(long)]
        all_configs: bool,
    },
    /// Delete topics.
    Delete {
        /// Topic names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Set or remove topic configs (IncrementalAlterConfigs).
    #[command(group(ArgGroup::new("change").required(true).multiple(true).args(["set", "delete"])))]
    AlterConfig {
        /// Topic name.
        name: String,
        /// KEY=VALUE to set (repeatable).
        #[arg(long, value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// KEY to reset to its default (repeatable).
        #[arg(long)]
        delete: Vec<String>,
    },
    /// Raise a topic's partition count.
    AddPartitions {
        /// Topic name.
        name: String,
        /// The new total number of partitions.
        #[arg(long)]
        total: i32,
    },
    /// Move a partition to other nodes or change its replica count
    /// (AlterPartitionReassignments, like `kafka-reassign-partitions.sh --execute`).
    #[command(group(ArgGroup::new("to").required(true).args(["replicas", "cancel"])))]
    Move {
        /// Topic name.
        name: String,
        /// Partition index.
        #[arg(long)]
        partition: i32,
        /// The new replica node ids, preferred leader first, e.g. `--replicas 4,2,3`.
        #[arg(long, value_delimiter = ',')]
        replicas: Vec<i32>,
        /// Cancel the move in progress (back to the replicas it started from).
        #[arg(long)]
        cancel: bool,
    },
    /// List the partition moves in progress (ListPartitionReassignments).
    Moves,
}

/// The resource an `acl` command names (at most one of them).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct AclResource {
    /// A topic (with --prefixed: every topic starting with it; `*`: every topic).
    #[arg(long)]
    pub topic: Option<String>,
    /// A consumer group.
    #[arg(long)]
    pub group: Option<String>,
    /// A transactional id.
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// The cluster.
    #[arg(long)]
    pub cluster: bool,
    /// The name is a prefix (PREFIXED pattern), not a literal name.
    #[arg(long)]
    pub prefixed: bool,
}

/// `acl ...`
#[derive(Subcommand, Debug)]
pub enum AclCmd {
    /// ACLs, all or those of a resource and/or a principal.
    List {
        #[command(flatten)]
        resource: AclResource,
        /// Only this principal's (`User:alice`).
        #[arg(long)]
        principal: Option<String>,
    },
    /// Allows (or with --deny denies) a principal operations on a resource.
    Add {
        #[command(flatten)]
        resource: AclResource,
        /// `User:alice`, or `User:*` for everyone.
        #[arg(long)]
        principal: String,
        /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
        /// ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL (repeatable).
        #[arg(long, required = true)]
        operation: Vec<String>,
        /// A DENY ACL (deny wins over allow).
        #[arg(long)]
        deny: bool,
        /// The client address it applies to.
        #[arg(long, default_value = "*")]
        host: String,
    },
    /// Removes the ACLs matching the resource, principal and operation given (all of a
    /// resource when only it is given).
    Remove {
        #[command(flatten)]
        resource: AclResource,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// Only this operation's.
        #[arg(long)]
        operation: Option<String>,
    },
}

/// The entity a `quota` command names: a user and/or a client id, named or the default.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct QuotaEntityArgs {
    /// A user (the principal's name without `User:`).
    #[arg(long)]
    pub user: Option<String>,
    /// The default of every user without a quota of its own.
    #[arg(long)]
    pub default_user: bool,
    /// A client id.
    #[arg(long)]
    pub client_id: Option<String>,
    /// The default of every client id without a quota of its own.
    #[arg(long)]
    pub default_client_id: bool,
}

/// `quota ...`
#[derive(Subcommand, Debug)]
pub enum QuotaCmd {
    /// Quotas, all or those of an entity.
    List {
        #[command(flatten)]
        entity: QuotaEntityArgs,
    },
    /// Sets an entity's byte rates (bytes per second, per broker shard) and request
    /// percentage (percent of one shard's time; 200 is two shards' worth).
    Set {
        #[command(flatten)]
        entity: QuotaEntityArgs,
        /// `producer_byte_rate`.
        #[arg(long)]
        producer_byte_rate: Option<u64>,
        /// `consumer_byte_rate`.
        #[arg(long)]
        consumer_byte_rate: Option<u64>,
        /// `request_percentage`.
        #[arg(long)]
        request_percentage: Option<u64>,
    },
    /// Removes quotas of an entity.
    Remove {
        #[command(flatten)]
        entity: QuotaEntityArgs,
        /// The quota to remove (repeatable): producer_byte_rate, consumer_byte_rate or
        /// request_percentage.
        #[arg(long, required = true)]
        key: Vec<String>,
    },
}

/// `user ...`
#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Every user with a SCRAM credential, its mechanisms and iterations.
    List,
    /// One user's mechanisms and iterations.
    Describe {
        /// User name.
        user: String,
    },
    /// Sets (or replaces) a user's credential for one mechanism; the password is the
    /// first line of stdin.
    Set {
        /// User name.
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// PBKDF2 iterations (4096..=16384).
        #[arg(long, default_value_t = 8192)]
        iterations: i32,
    },
    /// Deletes a user's credential for one mechanism.
    Delete {
        /// User name.
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long)]
        mechanism: String,
    },
}

/// `transactions ...`
#[derive(Subcommand, Debug)]
pub enum TransactionsCmd {
    /// Transactional ids and their state, from every broker's coordinator.
    List,
    /// One transactional id: producer id and epoch, state, timeout, start, partitions.
    Describe {
        /// Transactional id.
        transactional_id: String,
    },
    /// The producers of a partition, with the start offset of each one's open transaction.
    Producers {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
    },
    /// Abort a hanging transaction: the one open in the partition from START_OFFSET (see
    /// `producers`), whose producer and coordinator no longer end it.
    Abort {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// First offset of the transaction (TXN_START_OFFSET of `producers`).
        #[arg(long)]
        start_offset: i64,
    },
}

/// `group ...`
#[derive(Subcommand, Debug)]
pub enum GroupCmd {
    /// List groups (classic, consumer and share groups).
    List,
    /// Per partition: committed offset, log end offset, lag, member (like
    /// `kafka-consumer-groups.sh --describe`); of a share group: its members, and per
    /// partition its start offset, lag, records in flight and archived (the last from
    /// /metrics of each partition's leader, found through /v1/nodes at --admin).
    Describe {
        /// Group id.
        group: String,
    },
    /// Delete groups, share groups too (they must have no active members).
    Delete {
        /// Group ids.
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Move a group's committed offsets (a share group's start offsets). Dry run unless
    /// --execute.
    ResetOffsets(ResetArgs),
}

/// `group reset-offsets`.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("target").required(true).args([
    "to_earliest", "to_latest", "to_offset", "to_datetime", "to_timestamp_ms"
])))]
pub struct ResetArgs {
    /// Group id.
    pub group: String,
    /// Topic to reset (repeatable); default: every topic the group has offsets for.
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    /// To the log start offset.
    #[arg(long)]
    pub to_earliest: bool,
    /// To the log end offset (skip everything).
    #[arg(long)]
    pub to_latest: bool,
    /// To this offset (clamped to the partition's earliest..=latest).
    #[arg(long)]
    pub to_offset: Option<i64>,
    /// To the first offset at or after this time (RFC 3339 UTC, e.g. 2024-05-01T12:00:00Z).
    #[arg(long, value_parser = parse_datetime_ms)]
    pub to_datetime: Option<i64>,
    /// To the first offset at or after this time (milliseconds since the Unix epoch).
    #[arg(long)]
    pub to_timestamp_ms: Option<i64>,
    /// Apply the plan (default: print it and change nothing).
    #[arg(long)]
    pub execute: bool,
}

/// Where a reset goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetTarget {
    /// Log start.
    Earliest,
    /// Log end.
    Latest,
    /// An offset.
    Offset(i64),
    /// A timestamp (ms since the epoch).
    TimestampMs(i64),
}

impl ResetArgs {
    /// The one target the ArgGroup guarantees.
    pub fn target(&self) -> ResetTarget {
        if self.to_earliest {
            ResetTarget::Earliest
        } else if self.to_latest {
            ResetTarget::Latest
        } else if let Some(o) = self.to_offset {
            ResetTarget::Offset(o)
        } else if let Some(t) = self.to_datetime.or(self.to_timestamp_ms) {
            ResetTarget::TimestampMs(t)
        } else {
            unreachable!("clap's required ArgGroup `target` guarantees one of the flags")
        }
    }
}

/// Producer acknowledgement levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Acks {
    /// No response (fire and forget).
    #[value(name = "0")]
    None,
    /// The leader appended.
    #[value(name = "1")]
    Leader,
    /// Committed by the in-sync replicas.
    #[value(name = "all", alias = "-1")]
    All,
}

impl Acks {
    /// The wire value.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// `produce`.
#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// Topic.
    pub topic: String,
    /// Split each line at the first occurrence into KEY and VALUE (default: no key).
    #[arg(long)]
    pub key_separator: Option<String>,
    /// Header KEY=VALUE added to every record (repeatable).
    #[arg(long = "header", value_parser = parse_key_value)]
    pub headers: Vec<(String, String)>,
    /// Partition (default: murmur2 of the key like Kafka's producer, partition 0 for
    /// records without key).
    #[arg(short, long)]
    pub partition: Option<i32>,
    /// Acknowledgements: 0, 1 or all.
    #[arg(long, value_enum, default_value = "all")]
    pub acks: Acks,
    /// Records per produce request.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_records: u32,
}

/// Where a consumer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartOffset {
    /// Log start.
    Earliest,
    /// Log end (only new records).
    Latest,
    /// An exact offset.
    At(i64),
}

/// Output format of `consume`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The value (with --print-key / --print-headers: key and headers too).
    Text,
    /// One JSON object per record: topic, partition, offset, timestamp_ms, key, value, headers.
    Json,
}

/// `consume`.
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Topic.
    pub topic: String,
    /// Read as this group: start at its committed offsets and commit what was printed
    /// (a standalone commit: strandctl does not join the group, so the group must have
    /// no active members).
    #[arg(short, long, conflicts_with = "partition")]
    pub group: Option<String>,
    /// Only this partition (default: all).
    #[arg(short, long)]
    pub partition: Option<i32>,
    /// Where to start: earliest, latest or an offset (with --group: only where the group
    /// has no committed offset).
    #[arg(short, long, default_value = "earliest", value_parser = parse_start_offset)]
    pub offset: StartOffset,
    /// Stop after this many records.
    #[arg(short, long)]
    pub num: Option<u64>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,
    /// Stop when no record arrived for this long, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub timeout_ms: u64,
    /// Text format: print KEY<separator>VALUE.
    #[arg(long)]
    pub print_key: bool,
    /// Text format: print headers as k=v,k=v before the record, tab-separated.
    #[arg(long)]
    pub print_headers: bool,
    /// Separator between key and value for --print-key.
    #[arg(long, default_value = "\t")]
    pub key_separator: String,
}

/// `cluster ...`
#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Cluster id, controller and brokers (Metadata, DescribeCluster).
    Info,
    /// Liveness and readiness from the admin API (/v1/health, /v1/status); exit 3 if not ready.
    Health,
    /// Remove a node from the cluster (UnregisterBroker) once it holds no replicas (move
    /// them first: `topic move`); controller voters (seeds) cannot leave.
    RemoveNode {
        /// The node id.
        id: i32,
    },
    /// The controller quorum (DescribeQuorum): leader, epoch, voters and observers with
    /// their log ends (known when the node asked leads the controller).
    Quorum,
    /// Make a registered node a controller voter (AddRaftVoter); waits until the controller
    /// group has moved to the new voters.
    AddController {
        /// The node id.
        id: i32,
    },
    /// Make a controller voter a follower of the controller again (RemoveRaftVoter); waits
    /// until the controller group has moved. A seed whose machine is gone: add another node
    /// first, then remove it, then `drain` and `remove-node` it.
    RemoveController {
        /// The node id.
        id: i32,
    },
    /// Move every replica off a node (AlterPartitionReassignments): each to the listed
    /// node with the fewest replicas that does not hold the partition. Exit 3 if a
    /// partition could not be moved (or, with --wait-s, did not finish in time).
    Drain {
        /// The node id.
        id: i32,
        /// Wait up to this many seconds until no partition names the node.
        #[arg(long)]
        wait_s: Option<u64>,
    },
}

/// Which broker resource: one node, or the cluster default.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct BrokerTarget {
    /// A node's own configs (`--entity-name N`); asked of that node.
    #[arg(long)]
    pub id: Option<i32>,
    /// The cluster default every node runs with unless it sets its own (`--entity-default`).
    #[arg(long)]
    pub default: bool,
}

/// `broker ...`
#[derive(Subcommand, Debug)]
pub enum BrokerCmd {
    /// Show the dynamic configs set (DescribeConfigs); `--all` shows every config of a node.
    DescribeConfig {
        #[command(flatten)]
        target: BrokerTarget,
        /// Every config with its source, not only those set dynamically.
        #[arg(long)]
        all: bool,
    },
    /// Set or remove dynamic configs (IncrementalAlterConfigs), e.g.
    /// `--default --set log.retention.ms=86400000`: log defaults apply at once to topics that
    /// set none.
    #[command(group(ArgGroup::new("change").required(true).multiple(true).args(["set", "delete"])))]
    AlterConfig {
        #[command(flatten)]
        target: BrokerTarget,
        /// KEY=VALUE to set (repeatable).
        #[arg(long, value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// KEY to remove (back to the cluster default or the broker's own setting; repeatable).
        #[arg(long)]
        delete: Vec<String>,
    },
}

/// `config ...`
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Check a strand TOML config file: unknown keys and bad values, by key name (exit 3 if any).
    Validate {
        /// The file.
        file: PathBuf,
    },
}

/// `self-test`.
#[derive(Args, Debug)]
pub struct SelfTestArgs {
    /// Directory on the disk to test (the data directory); a temporary file is made in it.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes written (then read) with O_DIRECT.
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    pub disk_bytes: u64,
    /// Size of each O_DIRECT write and read (multiple of 4096).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub block_bytes: u64,
    /// Number of 4 KiB append + fdatasync samples.
    #[arg(long, default_value_t = 200)]
    pub sync_samples: u32,
    /// Number of ApiVersions round trips to the broker.
    #[arg(long, default_value_t = 1000)]
    pub rtt_samples: u32,
    /// Bytes produced to a temporary topic for the throughput figure.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub produce_bytes: u64,
    /// Another node's admin address (HOST:PORT, repeatable): the node at `--admin` measures
    /// round trips and a bulk transfer to it through the admin API (node-to-node network).
    #[arg(long = "peer-admin")]
    pub peer_admin: Vec<String>,
    /// Round trips per peer.
    #[arg(long, default_value_t = 100)]
    pub peer_rounds: u32,
    /// Bytes transferred from each peer.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub peer_bytes: u64,
    /// Skip the disk tests.
    #[arg(long)]
    pub skip_disk: bool,
    /// Skip the network tests (no broker needed).
    #[arg(long)]
    pub skip_network: bool,
    /// Exit 3 when any figure is WARN.
    #[arg(long)]
    pub strict: bool,
}

/// `tune ...`
#[derive(Subcommand, Debug)]
pub enum TuneCmd {
    /// Report each setting, its current and recommended value (never writes; exit 3 if
    /// something should change).
    Check {
        /// The data directory (for its block device's I/O scheduler).
        #[arg(long, default_value = ".")]
        data_dir: PathBuf,
    },
    /// Apply the recommended values that can be changed at runtime (asks per change).
    Apply {
        /// The data directory (for its block device's I/O scheduler).
        #[arg(long, default_value = ".")]
        data_dir: PathBuf,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
}

/// `KEY=VALUE`, split at the first `=`; the key must not be empty.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// `earliest`, `latest` or a non-negative offset.
pub fn parse_start_offset(s: &str) -> Result<StartOffset, String> {
    match s {
        "earliest" | "beginning" => Ok(StartOffset::Earliest),
        "latest" | "end" => Ok(StartOffset::Latest),
        n => match n.parse::<i64>() {
            Ok(o) if o >= 0 => Ok(StartOffset::At(o)),
            _ => Err(format!(
                "expected earliest, latest or an offset >= 0, got {s:?}"
            )),
        },
    }
}

/// RFC 3339 in UTC (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`, or without seconds) to ms since the epoch.
pub fn parse_datetime_ms(s: &str) -> Result<i64, String> {
    let bad = || format!("expected a UTC time like 2024-05-01T12:00:00Z, got {s:?}");
    let body = s.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = body.split_once('T').ok_or_else(bad)?;
    let num = |t: &str| t.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d[..] else {
        return Err(bad());
    };
    let (hms, millis) = match time.split_once('.') {
        Some((hms, frac)) if frac.len() == 3 => (hms, num(frac)?),
        Some(_) => return Err(bad()),
        None => (time, 0),
    };
    let t: Vec<&str> = hms.split(':').collect();
    let (h, mi, se) = match t[..] {
        [h, mi] => (num(h)?, num(mi)?, 0),
        [h, mi, se] => (num(h)?, num(mi)?, num(se)?),
        _ => return Err(bad()),
    };
    let (y, mo, da) = (num(y)?, num(mo)?, num(da)?);
    let valid = (1..=12).contains(&mo)
        && (1..=31).contains(&da)
        && (0..24).contains(&h)
        && (0..60).contains(&mi)
        && (0..61).contains(&se)
        && y >= 1970;
    if !valid {
        return Err(bad());
    }
    let days = days_from_civil(y, mo, da);
    Ok(((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("strandctl").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn reset_offsets_needs_exactly_one_target() {
        let cli = parse(&["group", "reset-offsets", "g", "--to-earliest"]).expect("valid");
        let Command::Group(GroupCmd::ResetOffsets(r)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(r.target(), ResetTarget::Earliest);
        assert!(!r.execute, "dry run by default");
        let e = parse(&["group", "reset-offsets", "g"]).expect_err("no target");
        assert_eq!(e.exit_code(), 2);
        assert!(parse(&[
            "group",
            "reset-offsets",
            "g",
            "--to-earliest",
            "--to-latest"
        ])
        .is_err());
        let cli = parse(&[
            "group",
            "reset-offsets",
            "g",
            "--to-datetime",
            "1970-01-02T00:00:01.500Z",
            "--execute",
        ])
        .expect("valid");
        let Command::Group(GroupCmd::ResetOffsets(r)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(r.target(), ResetTarget::TimestampMs(86_401_500));
        assert!(r.execute);
    }

    #[test]
    fn produce_and_consume_flags() {
        let cli = parse(&[
            "produce",
            "t",
            "--key-separator",
            ":",
            "--header",
            "a=b=c",
            "--header",
            "x=",
            "--acks",
            "1",
        ])
        .expect("valid");
        let Command::Produce(p) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(
            p.headers,
            vec![("a".into(), "b=c".into()), ("x".into(), String::new())]
        );
        assert_eq!(p.acks, Acks::Leader);
        assert!(parse(&["produce", "t", "--header", "=v"]).is_err());
        assert!(parse(&["consume", "t", "--group", "g", "--partition", "0"]).is_err());
        let cli = parse(&["consume", "t", "--offset", "42", "--format", "json"]).expect("valid");
        let Command::Consume(c) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!((c.offset, c.format), (StartOffset::At(42), Format::Json));
        assert!(parse(&["consume", "t", "--offset", "-3"]).is_err());
    }

    #[test]
    fn datetimes_parse_to_epoch_ms() {
        for (s, want) in [
            ("1970-01-01T00:00:00Z", Ok(0)),
            ("2000-03-01T00:00Z", Ok(951_868_800_000)),
            ("2024-05-01T12:00:00.250Z", Ok(1_714_564_800_250)),
        ] {
            assert_eq!(parse_datetime_ms(s), want, "{s}");
        }
        for s in [
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "yesterday",
            "2024-05-01T12:00:00+02:00",
        ] {
            assert!(parse_datetime_ms(s).is_err(), "{s}");
        }
    }

    #[test]
    fn alter_config_needs_a_change() {
        assert!(parse(&["topic", "alter-config", "t"]).is_err());
        assert!(parse(&["topic", "alter-config", "t", "--delete", "retention.ms"]).is_ok());
    }
}
