//! Cluster metadata as a state machine over commands, shaped as the future controller
//! Raft group's (ARCHITECTURE.md, Replication: Controller): the single-node metadata log
//! stores these commands; replaying them rebuilds [`Metadata`].
//!
//! Invariant: `apply` is pure and deterministic; a command that fails validation changes
//! nothing. Topic names follow Kafka's rules. Partition -> shard placement is recorded
//! in the commands (node-local placement, ARCHITECTURE.md, The shard runtime).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::security::acl::AclBinding;
use crate::security::quota::{QuotaEntity, QuotaValue, Quotas};

/// Kafka's longest topic name.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Most controller voters (Kafka advises 3 or 5; each is in every metadata change's quorum).
pub const CONTROLLER_VOTERS_MAX: usize = 7;
pub use crate::common::config::PARTITIONS_PER_TOPIC_MAX;

/// A change to cluster metadata.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Command {
    /// First command of a new cluster.
    InitCluster {
        /// The cluster id clients see.
        cluster_id: String,
    },
    /// Creates a topic with partitions placed on shards.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Topic id (Kafka UUID as 16 bytes, big-endian u128).
        id: u128,
        /// Shard of each partition, by partition index.
        shards: Vec<u32>,
        /// Topic-level config overrides.
        configs: BTreeMap<String, String>,
        /// Replica node ids of each partition, preferred leader first (empty: the single
        /// node, no replication).
        #[serde(default)]
        replicas: Vec<Vec<i32>>,
    },
    /// Deletes a topic.
    DeleteTopic {
        /// Topic name.
        name: String,
        /// Names the request (random; 0 in entries written before it was recorded): the
        /// apply remembers it (`Metadata::deletions`), so of two nodes deleting one topic at
        /// once the one whose entry lost tells (Kafka answers the second
        /// UNKNOWN_TOPIC_OR_PARTITION).
        #[serde(default, skip_serializing_if = "is_zero_token")]
        token: u128,
    },
    /// Adds partitions to a topic.
    CreatePartitions {
        /// Topic name.
        name: String,
        /// Shards of the new partitions, in order.
        shards: Vec<u32>,
        /// Replica node ids of the new partitions (empty without replication).
        #[serde(default)]
        replicas: Vec<Vec<i32>>,
        /// The partition count the request grew from: refused when the topic has another
        /// by then (two requests for the same count must not both add; Kafka refuses the
        /// second INVALID_PARTITIONS). None in entries written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_count: Option<usize>,
        /// Names the request (random; 0 in older entries): the apply keeps it in the
        /// topic (`Topic::grown_by`), so a node whose request lost the race answers
        /// INVALID_PARTITIONS, as Kafka does, rather than success.
        #[serde(default, skip_serializing_if = "is_zero_token")]
        token: u128,
    },
    /// A node announces its listeners (cluster mode).
    RegisterNode(NodeInfo),
    /// A node joining through a seed gets an id: `info.id` if it asked for one that is
    /// free (or its own), else one past every id in use; `token` makes a retry idempotent.
    AdmitNode {
        /// The joining process's random token.
        token: String,
        /// Its listeners (`id` 0: assign one).
        info: NodeInfo,
        /// The controller voters (`--seeds`): their ids are taken even before they
        /// register.
        seeds: Vec<i32>,
    },
    /// Removes a node from the cluster (Kafka's UnregisterBroker): refused while it holds
    /// a replica of any partition. Its id is not handed out again.
    RemoveNode {
        /// The node.
        id: i32,
    },
    /// Reserves producer ids below `up_to` (never handed out again after a restart).
    ReserveProducerIds {
        /// Ids below this are reserved.
        up_to: i64,
        /// Cluster mode: the node reserving the block (it alone hands out its ids).
        #[serde(default)]
        owner: Option<i32>,
    },
    /// Starts moving a partition to the replicas `target` (Kafka's
    /// AlterPartitionReassignments), or with `None` cancels the move in progress: it goes
    /// back to the replicas it started from. The partition's leader then changes the Raft
    /// group's membership step by step and commits `FinishReassignment`.
    ReassignPartition {
        /// Topic name.
        name: String,
        /// Partition index.
        partition: i32,
        /// The new replicas, preferred leader first; `None` cancels.
        target: Option<Vec<i32>>,
    },
    /// The partition's Raft group has exactly the voters `target`: the move is over.
    FinishReassignment {
        /// Topic name.
        name: String,
        /// Partition index.
        partition: i32,
        /// The target it reached (refused unless it is still the move's target).
        target: Vec<i32>,
    },
    /// The controller group's voters from now on (the controller's leader moves the group
    /// to them, one configuration change at a time); every other node follows as a learner.
    SetControllerVoters {
        /// Registered node ids, sorted, without duplicates.
        voters: Vec<i32>,
    },
    /// Sets (or replaces) a user's SCRAM credential for one mechanism (Kafka's
    /// AlterUserScramCredentials upsertion; the password itself is never sent).
    UpsertScramCredential {
        /// The user.
        user: String,
        /// Kafka's mechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
        mechanism: i8,
        /// What is stored.
        credential: ScramEntry,
    },
    /// Removes a user's SCRAM credential for one mechanism.
    DeleteScramCredential {
        /// The user.
        user: String,
        /// Kafka's mechanism type.
        mechanism: i8,
    },
    /// Adds ACLs (CreateAcls; one already there stays once).
    CreateAcls {
        /// Each valid (`AclBinding::validate`).
        acls: Vec<AclBinding>,
    },
    /// Removes ACLs (DeleteAcls: the ones its filters matched when it was asked).
    DeleteAcls {
        /// Exact ACLs; one not there is ignored.
        acls: Vec<AclBinding>,
    },
    /// Sets and removes client quotas of one entity (AlterClientQuotas).
    AlterClientQuota {
        /// The entity.
        entity: QuotaEntity,
        /// Quotas set (key → value > 0).
        set: BTreeMap<String, QuotaValue>,
        /// Quotas removed.
        remove: Vec<String>,
    },
    /// Sets and removes one group's configs (IncrementalAlterConfigs on a GROUP resource;
    /// `share.*`, KIP-932).
    AlterGroupConfig {
        /// Group id.
        group: String,
        /// Keys to set.
        set: BTreeMap<String, String>,
        /// Keys to remove (back to the default).
        delete: Vec<String>,
    },
    /// Sets and removes dynamic broker configs of one node, or the cluster default
    /// (IncrementalAlterConfigs and AlterConfigs on a BROKER resource;
    /// `cluster::broker_config`).
    AlterBrokerConfig {
        /// The node's id, or "" for the cluster default.
        broker: String,
        /// Keys to set.
        set: BTreeMap<String, String>,
        /// Keys to remove (back to the cluster default or the static setting).
        delete: Vec<String>,
    },
    /// Changes topic config overrides.
    AlterConfig {
        /// Topic name.
        name: String,
        /// Keys to set.
        set: BTreeMap<String, String>,
        /// Keys to remove (back to the default).
        delete: Vec<String>,
    },
}

impl Command {
    /// The command's name, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::InitCluster { .. } => "init_cluster",
            Command::RegisterNode(_) => "register_node",
            Command::AdmitNode { .. } => "admit_node",
            Command::CreateTopic { .. } => "create_topic",
            Command::DeleteTopic { .. } => "delete_topic",
            Command::CreatePartitions { .. } => "create_partitions",
            Command::ReserveProducerIds { .. } => "reserve_producer_ids",
            Command::RemoveNode { .. } => "remove_node",
            Command::ReassignPartition { .. } => "reassign_partition",
            Command::FinishReassignment { .. } => "finish_reassignment",
            Command::SetControllerVoters { .. } => "set_controller_voters",
            Command::AlterConfig { .. } => "alter_config",
            Command::UpsertScramCredential { .. } => "upsert_scram_credential",
            Command::DeleteScramCredential { .. } => "delete_scram_credential",
            Command::CreateAcls { .. } => "create_acls",
            Command::DeleteAcls { .. } => "delete_acls",
            Command::AlterClientQuota { .. } => "alter_client_quota",
            Command::AlterGroupConfig { .. } => "alter_group_config",
            Command::AlterBrokerConfig { .. } => "alter_broker_config",
        }
    }
}

/// A node of the cluster as it registered.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node id (`--node-id`).
    pub id: i32,
    /// Host advertised to Kafka clients.
    pub host: String,
    /// Kafka listener port.
    pub kafka_port: u16,
    /// Native handshake port.
    pub native_port: u16,
    /// Shards it runs (must equal every other node's).
    pub shards: u32,
    /// Internal RPC port of its shard 0 (on `host`); 0 from a version before joining.
    #[serde(default)]
    pub rpc_port: u16,
    /// What clients are told per Kafka listener name (empty from a version before named
    /// listeners: `host`:`kafka_port` for every name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<Endpoint>,
    /// Port of its admin API (metrics; on `host`); 0 from a version before it was
    /// registered.
    #[serde(default)]
    pub admin_port: u16,
    /// Its data directory's incarnation (`cluster::incarnation`); 0 from a version before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub incarnation: u64,
}

fn is_zero_token(n: &u128) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A node's advertised endpoint of one Kafka listener.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    /// Listener name (`listeners`).
    pub name: String,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
}

impl NodeInfo {
    /// Where a client of the listener named `listener` reaches this node: none if the
    /// node has no such listener (Kafka leaves such a broker out of what it tells that
    /// client).
    pub fn endpoint(&self, listener: &str) -> Option<(String, u16)> {
        if self.listeners.is_empty() {
            return Some((self.host.clone(), self.kafka_port));
        }
        self.listeners
            .iter()
            .find(|e| e.name == listener)
            .map(|e| (e.host.clone(), e.port))
    }
}

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topic {
    /// Topic id.
    pub id: u128,
    /// Shard of each partition.
    pub shards: Vec<u32>,
    /// Config overrides.
    pub configs: BTreeMap<String, String>,
    /// Replica node ids of each partition (empty without replication).
    pub replicas: Vec<Vec<i32>>,
    /// Sequence number of the topic in the metadata log: its partitions' Raft groups are
    /// `seq * GROUPS_PER_TOPIC + partition + 1` (group 0 is the controller).
    pub seq: u64,
    /// Replica node ids each partition was created with: the configuration its Raft group
    /// starts from, before the configuration changes in its log.
    pub origin: Vec<Vec<i32>>,
    /// The incarnation each `origin` replica's node had registered when the partition was
    /// created (0: unknown), in `origin`'s shape (`cluster::incarnation`).
    pub origin_incarnations: Vec<Vec<u64>>,
    /// Partitions being moved (`ReassignPartition`), by index. Their `replicas` are the
    /// target followed by the other replicas still in the group.
    pub moving: BTreeMap<i32, Reassignment>,
    /// Partitions ever moved: a node that hosts one without a log joins as a learner
    /// instead of as one of the `origin` voters (it may have been removed since).
    pub moved: std::collections::BTreeSet<i32>,
    /// The token of the CreatePartitions that grew it last (0: none, or one written
    /// without a token).
    pub grown_by: u128,
}

/// A partition move in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reassignment {
    /// The replicas before the move.
    pub from: Vec<i32>,
    /// The replicas after it, preferred leader first.
    pub target: Vec<i32>,
}

/// Raft group ids reserved per topic (the partition limit).
pub const GROUPS_PER_TOPIC: u64 = PARTITIONS_PER_TOPIC_MAX as u64;

impl Topic {
    /// The Raft group of partition `p`.
    pub fn group_of(&self, p: i32) -> u64 {
        self.seq * GROUPS_PER_TOPIC + p.max(0) as u64 + 1
    }

    /// Starts (or with `None` cancels) moving partition `p`, already checked: the replicas
    /// become the target followed by every other replica still in the group, so each node
    /// that may be a member keeps hosting it until the move finishes.
    fn reassign(&mut self, p: i32, target: Option<&[i32]>) {
        let Some(current) = self.replicas.get(p as usize).cloned() else {
            return;
        };
        let from = self
            .moving
            .get(&p)
            .map_or_else(|| current.clone(), |m| m.from.clone());
        let target = target.map_or_else(|| from.clone(), <[i32]>::to_vec);
        let same_set = |a: &[i32], b: &[i32]| {
            let (mut a, mut b) = (a.to_vec(), b.to_vec());
            a.sort_unstable();
            b.sort_unstable();
            a == b
        };
        let mut replicas = target.clone();
        replicas.extend(current.iter().filter(|n| !target.contains(n)));
        if same_set(&target, &current) && !self.moving.contains_key(&p) {
            // Only the order (the preferred leader) changes: nothing to move.
            self.moving.remove(&p);
        } else {
            self.moving.insert(p, Reassignment { from, target });
            self.moved.insert(p);
        }
        self.replicas[p as usize] = replicas;
    }

    /// Replicas of partition `p` (empty without replication).
    pub fn replicas_of(&self, p: i32) -> &[i32] {
        usize::try_from(p)
            .ok()
            .and_then(|p| self.replicas.get(p))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether `node`, under `incarnation`, is one of the replicas partition `p` was
    /// created with and has kept the data directory it had then (`cluster::incarnation`):
    /// a blank replica there never held anything of the partition. False for a moved
    /// partition (its replicas may have been removed and added back since).
    pub fn born_on(&self, p: i32, node: i32, incarnation: u64) -> bool {
        let Ok(i) = usize::try_from(p) else {
            return false;
        };
        let (Some(origin), Some(incarnations)) =
            (self.origin.get(i), self.origin_incarnations.get(i))
        else {
            return false;
        };
        incarnation != 0
            && !self.moved.contains(&p)
            && origin
                .iter()
                .zip(incarnations)
                .any(|(&n, &at)| n == node && at == incarnation)
    }
}

/// Cluster metadata: an immutable snapshot of it is shared (`Arc`) with every shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Cluster id (empty until `InitCluster`).
    pub cluster_id: String,
    /// Topics by name.
    pub topics: BTreeMap<String, Topic>,
    /// Commands applied so far.
    pub version: u64,
    /// Producer ids below this have been reserved.
    pub producer_ids_reserved_to: i64,
    /// Cluster mode: the node that reserved the block ending at `producer_ids_reserved_to`.
    pub producer_ids_owner: Option<i32>,
    /// Registered nodes (cluster mode).
    pub nodes: BTreeMap<i32, NodeInfo>,
    /// Topics created so far (the next topic's `seq`).
    pub topics_created: u64,
    /// The id each join token was given (`AdmitNode`).
    pub join_tokens: BTreeMap<String, i32>,
    /// The controller group's voters set by `SetControllerVoters` (sorted); empty: the
    /// seeds, as at the cluster's start.
    pub controller_voters: Vec<i32>,
    /// SCRAM credentials: user → Kafka mechanism type → credential.
    pub scram: BTreeMap<String, BTreeMap<i8, ScramEntry>>,
    /// ACLs (`security::acl`).
    pub acls: std::collections::BTreeSet<AclBinding>,
    /// Client quotas (`security::quota`).
    pub quotas: Quotas,
    /// Group configs set with IncrementalAlterConfigs (`cluster::group_config`).
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Dynamic broker configs by resource name (a node id, or "" for the cluster default;
    /// `cluster::broker_config`).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// The tokens of the last [`DELETIONS_REMEMBERED`] topic deletions applied with one,
    /// oldest first (random, so a token names its request alone; no names: the metadata
    /// is copied at every change).
    pub deletions: std::collections::VecDeque<u128>,
}

/// Topic deletions the metadata remembers (`Metadata::deletions`): a proposer looks its
/// own up within seconds of proposing it, and concurrent deletions are few.
pub const DELETIONS_REMEMBERED: usize = 1024;

/// A stored SCRAM credential (RFC 5802: never the password).
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScramEntry {
    /// The salt.
    pub salt: Vec<u8>,
    /// Hi's iteration count.
    pub iterations: i32,
    /// StoredKey.
    pub stored_key: Vec<u8>,
    /// ServerKey.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramEntry")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Fewest SCRAM iterations accepted (Kafka's, RFC 7677's).
pub const SCRAM_ITERATIONS_MIN: i32 = 4096;
/// Most SCRAM iterations accepted (Kafka's).
pub const SCRAM_ITERATIONS_MAX: i32 = 16384;
/// Longest SCRAM user name (bytes).
pub const SCRAM_USER_BYTES_MAX: usize = 1024;
/// Longest salt or key stored (bytes; SHA-512's keys are 64).
pub const SCRAM_FIELD_BYTES_MAX: usize = 1024;

/// Why a command was refused; each maps to one Kafka error code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// TOPIC_ALREADY_EXISTS (36).
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    /// UNKNOWN_TOPIC_OR_PARTITION (3).
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    /// INVALID_TOPIC_EXCEPTION (17).
    #[error("invalid topic name '{0}': {1}")]
    InvalidTopic(String, &'static str),
    /// INVALID_PARTITIONS (37).
    #[error("invalid partition count {0}")]
    InvalidPartitions(i64),
    /// UNKNOWN_TOPIC_OR_PARTITION (3): the topic exists, the partition does not.
    #[error("topic '{0}' has no partition {1}")]
    UnknownPartition(String, i32),
    /// INVALID_REPLICA_ASSIGNMENT (39).
    #[error("invalid replica assignment: {0}")]
    InvalidAssignment(String),
    /// BROKER_ID_NOT_REGISTERED (102).
    #[error("node {0} is not registered")]
    UnknownNode(i32),
    /// INVALID_REQUEST (42): the node still holds replicas.
    #[error("node {0} still holds replicas of {1} partitions (e.g. {2}): move them first")]
    NodeInUse(i32, usize, String),
    /// INVALID_REQUEST (42): a controller voter cannot leave the cluster.
    #[error("node {0} is a controller voter: make other nodes the voters first")]
    ControllerVoter(i32),
    /// INVALID_REQUEST (42): an unusable set of controller voters.
    #[error("controller voters {0:?}: {1}")]
    InvalidVoters(Vec<i32>, &'static str),
    /// NO_REASSIGNMENT_IN_PROGRESS (85).
    #[error("no reassignment of '{0}' partition {1} is in progress")]
    NoReassignment(String, i32),
    /// UNACCEPTABLE_CREDENTIAL (93): a SCRAM credential out of Kafka's bounds.
    #[error("unacceptable credential: {0}")]
    UnacceptableCredential(String),
    /// UNSUPPORTED_SASL_MECHANISM (33).
    #[error("unsupported SCRAM mechanism {0}")]
    UnsupportedMechanism(i8),
    /// RESOURCE_NOT_FOUND (91): a credential to delete that does not exist.
    #[error("{0} not found")]
    ResourceNotFound(String),
    /// INVALID_REQUEST (42): an ACL Kafka would not store.
    #[error("invalid ACL: {0}")]
    InvalidRequest(String),
    /// UNKNOWN_SERVER_ERROR (-1): the metadata log could not be written.
    #[error("{0}")]
    Internal(String),
}

impl MetaError {
    /// The Kafka error code a Kafka broker returns for this.
    pub fn kafka_code(&self) -> i16 {
        match self {
            MetaError::UnacceptableCredential(_) => 93,
            MetaError::UnsupportedMechanism(_) => 33,
            MetaError::ResourceNotFound(_) => 91,
            MetaError::TopicExists(_) => 36,
            MetaError::UnknownTopic(_) => 3,
            MetaError::InvalidTopic(..) => 17,
            MetaError::InvalidPartitions(_) => 37,
            MetaError::UnknownPartition(..) => 3,
            MetaError::InvalidAssignment(_) => 39,
            MetaError::NoReassignment(..) => 85,
            MetaError::UnknownNode(_) => 102,
            MetaError::NodeInUse(..) => 42,
            MetaError::ControllerVoter(_) | MetaError::InvalidVoters(..) => 42,
            MetaError::InvalidRequest(_) => 42,
            MetaError::Internal(_) => -1,
        }
    }
}

/// Kafka's rules for a client quota: an entity with a user or a client id, known keys,
/// positive values.
fn check_quota(entity: &QuotaEntity, set: &BTreeMap<String, QuotaValue>) -> Result<(), MetaError> {
    if entity.user.is_none() && entity.client_id.is_none() {
        return Err(MetaError::InvalidRequest(
            "a quota entity needs a user or a client id".into(),
        ));
    }
    for (k, v) in set {
        if !crate::security::quota::KEYS.contains(&k.as_str()) {
            return Err(MetaError::InvalidRequest(format!(
                "unknown or unsupported quota {k}"
            )));
        }
        if !(v.0.is_finite() && v.0 > 0.0) {
            return Err(MetaError::InvalidRequest(format!(
                "quota {k} must be positive, got {}",
                v.0
            )));
        }
    }
    Ok(())
}

/// Kafka's rules for a SCRAM credential change (AlterUserScramCredentials).
fn check_scram(
    user: &str,
    mechanism: i8,
    credential: Option<&ScramEntry>,
) -> Result<(), MetaError> {
    if user.is_empty() || user.len() > SCRAM_USER_BYTES_MAX {
        return Err(MetaError::UnacceptableCredential(format!(
            "a user name of 1 to {SCRAM_USER_BYTES_MAX} bytes"
        )));
    }
    if !matches!(mechanism, 1 | 2) {
        return Err(MetaError::UnsupportedMechanism(mechanism));
    }
    let Some(c) = credential else {
        return Ok(());
    };
    if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&c.iterations) {
        return Err(MetaError::UnacceptableCredential(format!(
            "iterations {} outside {SCRAM_ITERATIONS_MIN}..={SCRAM_ITERATIONS_MAX}",
            c.iterations
        )));
    }
    let fields = [&c.salt, &c.stored_key, &c.server_key];
    if fields
        .iter()
        .any(|f| f.is_empty() || f.len() > SCRAM_FIELD_BYTES_MAX)
    {
        return Err(MetaError::UnacceptableCredential(
            "an empty or oversized salt or key".to_string(),
        ));
    }
    Ok(())
}

/// Kafka's topic name rules.
pub fn validate_topic_name(name: &str) -> Result<(), MetaError> {
    let bad = |why| Err(MetaError::InvalidTopic(name.to_string(), why));
    if name.is_empty() {
        return bad("empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return bad("longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII alphanumerics, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Longest join token (`AdmitNode`).
pub const JOIN_TOKEN_BYTES_MAX: usize = 64;

impl Metadata {
    /// The incarnation each node of `replicas` has registered (0: unknown), same shape.
    fn incarnations_of(&self, replicas: &[Vec<i32>]) -> Vec<Vec<u64>> {
        let of = |n: &i32| self.nodes.get(n).map_or(0, |info| info.incarnation);
        replicas
            .iter()
            .map(|rs| rs.iter().map(of).collect())
            .collect()
    }

    /// The id a joining node gets (see `Command::AdmitNode`).
    fn admitted_id(&self, info: &NodeInfo, seeds: &[i32]) -> i32 {
        let taken_by_other = |id: i32| {
            seeds.contains(&id)
                || self.nodes.get(&id).is_some_and(|n| {
                    (n.host.as_str(), n.kafka_port) != (info.host.as_str(), info.kafka_port)
                })
        };
        if info.id >= 1 && !taken_by_other(info.id) {
            return info.id;
        }
        let used = self
            .nodes
            .keys()
            .chain(seeds)
            .chain(self.join_tokens.values())
            .copied()
            .max()
            .unwrap_or(0);
        used.saturating_add(1)
    }

    /// Checks `cmd` against the current state without applying it.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn check(&self, cmd: &Command) -> Result<(), MetaError> {
        match cmd {
            Command::InitCluster { .. } => Ok(()),
            Command::CreateAcls { acls } => acls
                .iter()
                .try_for_each(AclBinding::validate)
                .map_err(MetaError::InvalidRequest),
            Command::DeleteAcls { .. } => Ok(()),
            Command::AlterClientQuota { entity, set, .. } => check_quota(entity, set),
            Command::AlterGroupConfig { set, .. } => {
                crate::cluster::group_config::validate(set).map_err(MetaError::InvalidRequest)
            }
            Command::AlterBrokerConfig { broker, set, .. } => {
                use crate::cluster::broker_config as bc;
                bc::validate_resource(broker)
                    .and_then(|()| set.iter().try_for_each(|(k, v)| bc::validate(k, v)))
                    .map_err(|e| MetaError::InvalidRequest(e.to_string()))
            }
            Command::UpsertScramCredential {
                user,
                mechanism,
                credential,
            } => check_scram(user, *mechanism, Some(credential)),
            Command::DeleteScramCredential { user, mechanism } => {
                check_scram(user, *mechanism, None)?;
                if self
                    .scram
                    .get(user)
                    .is_some_and(|m| m.contains_key(mechanism))
                {
                    Ok(())
                } else {
                    Err(MetaError::ResourceNotFound(format!(
                        "the SCRAM credential of user {user} with mechanism {mechanism}"
                    )))
                }
            }
            Command::RegisterNode(n) if n.id >= 1 && n.shards >= 1 => Ok(()),
            Command::RegisterNode(n) => Err(MetaError::Internal(format!(
                "node registration with id {} and {} shards",
                n.id, n.shards
            ))),
            Command::AdmitNode { token, info, .. }
                if !token.is_empty()
                    && token.len() <= JOIN_TOKEN_BYTES_MAX
                    && info.id >= 0
                    && info.shards >= 1 =>
            {
                Ok(())
            }
            Command::AdmitNode { .. } => Err(MetaError::Internal(
                "a join needs a token of 1 to 64 bytes, an id >= 0 and at least one shard"
                    .to_string(),
            )),
            Command::ReserveProducerIds { up_to, .. } if *up_to > self.producer_ids_reserved_to => {
                Ok(())
            }
            Command::ReserveProducerIds { up_to, .. } => Err(MetaError::Internal(format!(
                "producer ids already reserved to {}, not {up_to}",
                self.producer_ids_reserved_to
            ))),
            Command::CreateTopic { name, shards, .. } => {
                validate_topic_name(name)?;
                if self.topics.contains_key(name) {
                    return Err(MetaError::TopicExists(name.clone()));
                }
                check_count(shards.len())
            }
            Command::DeleteTopic { name, .. } | Command::AlterConfig { name, .. } => self
                .topics
                .get(name)
                .map(|_| ())
                .ok_or(MetaError::UnknownTopic(name.clone())),
            Command::CreatePartitions {
                name,
                shards,
                from_count,
                ..
            } => {
                let t = self
                    .topics
                    .get(name)
                    .ok_or(MetaError::UnknownTopic(name.clone()))?;
                check_count(t.shards.len() + shards.len())?;
                if shards.is_empty() || from_count.is_some_and(|f| f != t.shards.len()) {
                    return Err(MetaError::InvalidPartitions(t.shards.len() as i64));
                }
                Ok(())
            }
            Command::RemoveNode { id } => {
                if !self.nodes.contains_key(id) {
                    return Err(MetaError::UnknownNode(*id));
                }
                if self.controller_voters.contains(id) {
                    return Err(MetaError::ControllerVoter(*id));
                }
                let held: Vec<String> = self
                    .topics
                    .iter()
                    .flat_map(|(name, t)| {
                        (0..t.shards.len() as i32)
                            .filter(|&p| t.replicas_of(p).contains(id))
                            .map(move |p| format!("{name}/{p}"))
                    })
                    .collect();
                match held.first() {
                    Some(first) => Err(MetaError::NodeInUse(*id, held.len(), first.clone())),
                    None => Ok(()),
                }
            }
            Command::SetControllerVoters { voters } => {
                let mut sorted = voters.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.is_empty() || sorted.len() > CONTROLLER_VOTERS_MAX {
                    return Err(MetaError::InvalidVoters(
                        voters.clone(),
                        "the controller needs 1 to 7 voters",
                    ));
                }
                if sorted.len() != voters.len() {
                    return Err(MetaError::InvalidVoters(
                        voters.clone(),
                        "a voter is named twice",
                    ));
                }
                match sorted.iter().find(|id| !self.nodes.contains_key(id)) {
                    Some(&id) => Err(MetaError::UnknownNode(id)),
                    None => Ok(()),
                }
            }
            Command::ReassignPartition {
                name,
                partition,
                target,
            } => {
                let t = self.partition_of(name, *partition)?;
                match target {
                    None if !t.moving.contains_key(partition) => {
                        Err(MetaError::NoReassignment(name.clone(), *partition))
                    }
                    None => Ok(()),
                    Some(target) => self.check_replicas(target),
                }
            }
            Command::FinishReassignment {
                name,
                partition,
                target,
            } => {
                let t = self.partition_of(name, *partition)?;
                match t.moving.get(partition) {
                    Some(m) if &m.target == target => Ok(()),
                    _ => Err(MetaError::NoReassignment(name.clone(), *partition)),
                }
            }
        }
    }

    /// The topic `name` if it has partition `p`.
    fn partition_of(&self, name: &str, p: i32) -> Result<&Topic, MetaError> {
        let t = self
            .topics
            .get(name)
            .ok_or(MetaError::UnknownTopic(name.to_string()))?;
        if p < 0 || p as usize >= t.shards.len() {
            return Err(MetaError::UnknownPartition(name.to_string(), p));
        }
        if t.replicas_of(p).is_empty() {
            return Err(MetaError::InvalidAssignment(
                "the topic is not replicated (a single-node broker)".into(),
            ));
        }
        Ok(t)
    }

    /// A replica list: registered nodes, each once, at least one.
    fn check_replicas(&self, target: &[i32]) -> Result<(), MetaError> {
        let bad = |why: String| Err(MetaError::InvalidAssignment(why));
        if target.is_empty() {
            return bad("no replicas".into());
        }
        if let Some(n) = target.iter().find(|n| !self.nodes.contains_key(n)) {
            return bad(format!("node {n} is not a registered node"));
        }
        let mut sorted = target.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != target.len() {
            return bad(format!("{target:?} names a node twice"));
        }
        Ok(())
    }

    /// Applies `cmd`; on error nothing changes.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn apply(&mut self, cmd: &Command) -> Result<(), MetaError> {
        self.check(cmd)?;
        match cmd {
            Command::InitCluster { cluster_id } => {
                // A second InitCluster (two controller leaders racing at first start) is
                // a no-op: the first one committed names the cluster.
                if self.cluster_id.is_empty() {
                    self.cluster_id = cluster_id.clone();
                }
            }
            Command::RegisterNode(n) => {
                self.nodes.insert(n.id, n.clone());
            }
            Command::AdmitNode { token, info, seeds } => {
                if !self.join_tokens.contains_key(token) {
                    let id = self.admitted_id(info, seeds);
                    self.join_tokens.insert(token.clone(), id);
                    self.nodes.insert(id, NodeInfo { id, ..info.clone() });
                }
            }
            Command::RemoveNode { id } => {
                self.nodes.remove(id);
            }
            Command::UpsertScramCredential {
                user,
                mechanism,
                credential,
            } => {
                self.scram
                    .entry(user.clone())
                    .or_default()
                    .insert(*mechanism, credential.clone());
            }
            Command::DeleteScramCredential { user, mechanism } => {
                if let Some(m) = self.scram.get_mut(user) {
                    m.remove(mechanism);
                    if m.is_empty() {
                        self.scram.remove(user);
                    }
                }
            }
            Command::SetControllerVoters { voters } => {
                let mut sorted = voters.clone();
                sorted.sort_unstable();
                self.controller_voters = sorted;
            }
            Command::ReserveProducerIds { up_to, owner } => {
                self.producer_ids_reserved_to = *up_to;
                self.producer_ids_owner = *owner;
            }
            Command::CreateTopic {
                name,
                id,
                shards,
                configs,
                replicas,
            } => {
                let t = Topic {
                    id: *id,
                    shards: shards.clone(),
                    configs: configs.clone(),
                    replicas: replicas.clone(),
                    seq: self.topics_created,
                    origin: replicas.clone(),
                    origin_incarnations: self.incarnations_of(replicas),
                    moving: BTreeMap::new(),
                    moved: Default::default(),
                    grown_by: 0,
                };
                self.topics_created += 1;
                self.topics.insert(name.clone(), t);
            }
            Command::DeleteTopic { name, token } => {
                self.topics.remove(name);
                if *token != 0 {
                    self.deletions.push_back(*token);
                    if self.deletions.len() > DELETIONS_REMEMBERED {
                        self.deletions.pop_front();
                    }
                }
            }
            Command::CreatePartitions {
                name,
                shards,
                replicas,
                token,
                ..
            } => {
                let incarnations = self.incarnations_of(replicas);
                if let Some(t) = self.topics.get_mut(name) {
                    t.shards.extend_from_slice(shards);
                    t.replicas.extend_from_slice(replicas);
                    t.origin.extend_from_slice(replicas);
                    t.origin_incarnations.extend(incarnations);
                    t.grown_by = *token;
                }
            }
            Command::ReassignPartition {
                name,
                partition,
                target,
            } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.reassign(*partition, target.as_deref());
                }
            }
            Command::FinishReassignment {
                name,
                partition,
                target,
            } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.moving.remove(partition);
                    if let Some(r) = t.replicas.get_mut(*partition as usize) {
                        *r = target.clone();
                    }
                }
            }
            Command::CreateAcls { acls } => self.acls.extend(acls.iter().cloned()),
            Command::AlterGroupConfig { group, set, delete } => {
                let values = self.group_configs.entry(group.clone()).or_default();
                values.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
                values.retain(|k, _| !delete.contains(k));
                if values.is_empty() {
                    self.group_configs.remove(group);
                }
            }
            Command::AlterBrokerConfig {
                broker,
                set,
                delete,
            } => {
                let values = self.broker_configs.entry(broker.clone()).or_default();
                values.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
                values.retain(|k, _| !delete.contains(k));
                if values.is_empty() {
                    self.broker_configs.remove(broker);
                }
            }
            Command::AlterClientQuota {
                entity,
                set,
                remove,
            } => {
                let values = self.quotas.entry(entity.clone()).or_default();
                values.extend(set.iter().map(|(k, v)| (k.clone(), *v)));
                values.retain(|k, _| !remove.contains(k));
                if values.is_empty() {
                    self.quotas.remove(entity);
                }
            }
            Command::DeleteAcls { acls } => {
                for a in acls {
                    self.acls.remove(a);
                }
            }
            Command::AlterConfig { name, set, delete } => {
                if let Some(t) = self.topics.get_mut(name) {
                    for k in delete {
                        t.configs.remove(k);
                    }
                    t.configs
                        .extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        self.version += 1;
        Ok(())
    }

    /// The name of the topic whose id is `id` (requests that name topics by id: Fetch v13+,
    /// DeleteTopics v6+). A walk of the topics, as ids are asked for once per topic of a
    /// request.
    pub fn topic_name_of(&self, id: u128) -> Option<&str> {
        self.topics
            .iter()
            .find(|(_, t)| t.id == id)
            .map(|(name, _)| name.as_str())
    }

    /// The shard owning `topic`/`partition`.
    pub fn shard_of(&self, topic: &str, partition: i32) -> Option<usize> {
        let t = self.topics.get(topic)?;
        let p = usize::try_from(partition).ok()?;
        t.shards.get(p).map(|&s| s as usize)
    }
}

fn check_count(n: usize) -> Result<(), MetaError> {
    if n == 0 || n > PARTITIONS_PER_TOPIC_MAX as usize {
        return Err(MetaError::InvalidPartitions(n as i64));
    }
    Ok(())
}

/// Places the replicas of `count` new partitions of `topic` from index `first` on `nodes`
/// (sorted ids): a stable hash of the topic picks the first node, then round-robin, so
/// preferred leaders (the first replica) spread evenly over the nodes.
pub fn place_replicas(
    topic: &str,
    first: usize,
    count: usize,
    nodes: &[i32],
    factor: usize,
) -> Vec<Vec<i32>> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    (first..first + count)
        .map(|p| {
            (0..factor.min(nodes.len()))
                .map(|r| nodes[(start + p + r) % nodes.len()])
                .collect()
        })
        .collect()
}

/// Places `count` new partitions of `topic`, starting at index `first`, on `shards` shards:
/// a stable hash of the topic picks the first shard, then round-robin.
pub fn place_partitions(topic: &str, first: usize, count: usize, shards: usize) -> Vec<u32> {
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    (first..first + count)
        .map(|p| ((start + p) % shards.max(1)) as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, n: usize) -> Command {
        Command::CreateTopic {
            name: name.into(),
            id: 7,
            shards: vec![0; n],
            configs: BTreeMap::new(),
            replicas: Vec::new(),
        }
    }

    #[test]
    fn commands_apply_and_refuse() {
        let mut m = Metadata::default();
        m.apply(&create("a", 2)).expect("create");
        assert_eq!(
            m.apply(&create("a", 1)),
            Err(MetaError::TopicExists("a".into()))
        );
        assert_eq!(
            m.apply(&create("b/c", 1)).map_err(|e| e.kafka_code()),
            Err(17)
        );
        assert_eq!(
            m.apply(&create("z", 0)).map_err(|e| e.kafka_code()),
            Err(37)
        );
        let add = Command::CreatePartitions {
            name: "a".into(),
            shards: vec![1],
            replicas: Vec::new(),
            from_count: Some(2),
            token: 7,
        };
        m.apply(&add).expect("add partitions");
        // A second request that grew from 2 too (sent at the same time) adds nothing.
        assert_eq!(m.apply(&add), Err(MetaError::InvalidPartitions(3)));
        assert_eq!(m.shard_of("a", 2), Some(1));
        m.apply(&Command::DeleteTopic {
            name: "a".into(),
            token: 9,
        })
        .expect("delete");
        assert_eq!(m.shard_of("a", 0), None);
        assert_eq!(m.version, 3);
    }

    #[test]
    fn replicas_spread_preferred_leaders_and_never_repeat_a_node() {
        let r = place_replicas("t", 0, 6, &[1, 2, 3], 3);
        for set in &r {
            let mut s = set.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 3, "{set:?}");
        }
        for n in 1..=3 {
            assert_eq!(r.iter().filter(|s| s[0] == n).count(), 2);
        }
        assert_eq!(place_replicas("t", 0, 2, &[1, 2, 3], 1)[0].len(), 1);
    }

    #[test]
    fn topics_get_distinct_group_ranges() {
        let mut m = Metadata::default();
        m.apply(&create("a", 2)).expect("a");
        m.apply(&create("b", 2)).expect("b");
        let (a, b) = (&m.topics["a"], &m.topics["b"]);
        assert_ne!(a.group_of(0), b.group_of(0));
        assert!(a.group_of(0) > 0, "group 0 is the controller");
        assert_eq!(b.group_of(1), b.group_of(0) + 1);
    }

    /// A cluster of nodes 1..=4 with topic "t": 2 partitions on nodes 1, 2, 3.
    fn four_nodes() -> Metadata {
        let mut m = Metadata::default();
        for id in 1..=4 {
            let info = NodeInfo {
                id,
                host: "127.0.0.1".into(),
                kafka_port: 9092,
                listeners: Vec::new(),
                native_port: 9093,
                shards: 1,
                rpc_port: 33145,
                admin_port: 9644,
                // Node 4's incarnation is unknown (a node of an older version).
                incarnation: if id == 4 { 0 } else { 100 + id as u64 },
            };
            m.apply(&Command::RegisterNode(info)).expect("register");
        }
        m.apply(&Command::CreateTopic {
            name: "t".into(),
            id: 1,
            shards: vec![0, 0],
            configs: BTreeMap::new(),
            replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
        })
        .expect("create");
        m
    }

    fn reassign(p: i32, target: Option<Vec<i32>>) -> Command {
        Command::ReassignPartition {
            name: "t".into(),
            partition: p,
            target,
        }
    }

    #[test]
    fn a_blank_replica_is_new_only_under_the_incarnation_its_partition_was_created_with() {
        let mut m = four_nodes();
        let t = &m.topics["t"];
        assert!(t.born_on(0, 1, 101) && t.born_on(1, 3, 103));
        assert!(
            !t.born_on(0, 1, 999),
            "a wiped data directory has a new incarnation"
        );
        assert!(!t.born_on(0, 4, 0), "node 4 holds no replica of it");
        assert!(
            !t.born_on(2, 1, 101) && !t.born_on(-1, 1, 101),
            "no such partition"
        );
        // Node 1 comes back wiped (a new incarnation) before partitions are added: the new
        // ones are born under its new one, the old ones keep the old one.
        let mut info = m.nodes[&1].clone();
        info.incarnation = 201;
        m.apply(&Command::RegisterNode(info))
            .expect("register again");
        m.apply(&Command::CreatePartitions {
            name: "t".into(),
            shards: vec![0],
            replicas: vec![vec![1, 2, 4]],
            from_count: None,
            token: 0,
        })
        .expect("add a partition");
        let t = &m.topics["t"];
        assert!(t.born_on(2, 1, 201) && !t.born_on(0, 1, 201));
        assert!(
            !t.born_on(2, 4, 0),
            "an unknown incarnation vouches for nothing"
        );
        // A moved partition's replicas may have been removed and added back since.
        m.apply(&reassign(0, Some(vec![4, 2, 3]))).expect("move");
        assert!(!m.topics["t"].born_on(0, 2, 102));
        assert!(m.topics["t"].born_on(1, 2, 102));
    }

    #[test]
    fn a_move_lists_the_target_first_and_ends_on_the_target() {
        let mut m = four_nodes();
        m.apply(&reassign(0, Some(vec![4, 2, 3]))).expect("move");
        let t = &m.topics["t"];
        assert_eq!(t.replicas_of(0), &[4, 2, 3, 1]);
        assert_eq!(t.origin[0], vec![1, 2, 3], "the origin never changes");
        assert!(t.moved.contains(&0));
        let finish = |target: Vec<i32>| Command::FinishReassignment {
            name: "t".into(),
            partition: 0,
            target,
        };
        assert_eq!(
            m.apply(&finish(vec![1, 2, 3])).map_err(|e| e.kafka_code()),
            Err(85),
            "only the move's own target finishes it"
        );
        m.apply(&finish(vec![4, 2, 3])).expect("finish");
        let t = &m.topics["t"];
        assert_eq!(t.replicas_of(0), &[4, 2, 3]);
        assert!(t.moving.is_empty());
        assert_eq!(t.replicas_of(1), &[2, 3, 1], "the other partition stays");
    }

    #[test]
    fn a_cancelled_move_goes_back_to_where_it_started() {
        let mut m = four_nodes();
        m.apply(&reassign(0, Some(vec![4]))).expect("move");
        m.apply(&reassign(0, Some(vec![4, 1])))
            .expect("a second target");
        let t = &m.topics["t"];
        assert_eq!(
            t.moving[&0].from,
            vec![1, 2, 3],
            "from the first move's start"
        );
        assert_eq!(t.replicas_of(0), &[4, 1, 2, 3]);
        m.apply(&reassign(0, None)).expect("cancel");
        let t = &m.topics["t"];
        assert_eq!(t.moving[&0].target, vec![1, 2, 3]);
        assert_eq!(
            t.replicas_of(0),
            &[1, 2, 3, 4],
            "4 stays until it left the group"
        );
        assert_eq!(
            m.apply(&reassign(1, None)).map_err(|e| e.kafka_code()),
            Err(85),
            "nothing to cancel"
        );
    }

    #[test]
    fn a_reorder_of_the_same_replicas_changes_only_the_preferred_leader() {
        let mut m = four_nodes();
        m.apply(&reassign(0, Some(vec![3, 1, 2]))).expect("reorder");
        let t = &m.topics["t"];
        assert_eq!(t.replicas_of(0), &[3, 1, 2]);
        assert!(t.moving.is_empty() && t.moved.is_empty());
    }

    #[test]
    fn bad_moves_get_kafkas_error_codes() {
        let mut m = four_nodes();
        let code = |m: &mut Metadata, c: Command| m.apply(&c).map_err(|e| e.kafka_code());
        assert_eq!(code(&mut m, reassign(0, Some(vec![]))), Err(39));
        assert_eq!(code(&mut m, reassign(0, Some(vec![1, 1]))), Err(39));
        assert_eq!(code(&mut m, reassign(0, Some(vec![1, 9]))), Err(39));
        assert_eq!(code(&mut m, reassign(2, Some(vec![1]))), Err(3));
        let unknown = Command::ReassignPartition {
            name: "nope".into(),
            partition: 0,
            target: Some(vec![1]),
        };
        assert_eq!(code(&mut m, unknown), Err(3));
        let mut single = Metadata::default();
        single.apply(&create("s", 1)).expect("create");
        let c = Command::ReassignPartition {
            name: "s".into(),
            partition: 0,
            target: Some(vec![1]),
        };
        assert_eq!(
            code(&mut single, c),
            Err(39),
            "no replication without a cluster"
        );
    }

    #[test]
    fn a_node_leaves_only_without_replicas() {
        let mut m = four_nodes();
        let remove = |id| Command::RemoveNode { id };
        let code = |m: &mut Metadata, c: Command| m.apply(&c).map_err(|e| e.kafka_code());
        assert_eq!(code(&mut m, remove(1)), Err(42), "node 1 holds replicas");
        assert_eq!(code(&mut m, remove(9)), Err(102));
        m.apply(&remove(4)).expect("node 4 holds nothing");
        assert!(!m.nodes.contains_key(&4));
        assert_eq!(
            code(&mut m, reassign(0, Some(vec![4, 2, 3]))),
            Err(39),
            "a removed node takes no replicas"
        );
    }

    #[test]
    fn placement_spreads_round_robin() {
        let p = place_partitions("t", 0, 4, 2);
        assert_eq!(p.iter().filter(|&&s| s == 0).count(), 2);
    }
}
