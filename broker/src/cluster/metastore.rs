//! The node's metadata log: [`Command`]s as records in a storage-engine log, replayed at
//! start. Lives on shard 0. It is the single-voter form of the controller Raft group's
//! log (ARCHITECTURE.md, Replication: Controller), so replication can adopt it unchanged.
//!
//! Invariant: a command is applied to [`Metadata`] only after it is durable in the log.

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use strand_storage::{AppendEntry, BatchCache, FrameKind, Log, LogConfig, RaftTerm, SystemClock};
use strand_wire::BatchBuilder;

use crate::cluster::metadata::{Command, MetaError, Metadata};

/// Directory of the metadata log under the data directory.
pub const METADATA_DIR: &str = "__strand_metadata";

/// The metadata log and the state it produces.
pub struct MetaStore {
    log: Log,
    state: Metadata,
}

impl MetaStore {
    /// Opens the log and replays every command; initializes a new cluster id if empty.
    pub async fn open(data_dir: &Path, config: LogConfig) -> anyhow::Result<MetaStore> {
        let cache = Rc::new(BatchCache::new(0));
        let log = Log::open(
            &data_dir.join(METADATA_DIR),
            config,
            Rc::new(SystemClock),
            cache,
        )
        .await?;
        let mut state = Metadata::default();
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            let r = log.read(next, log.log_end_offset(), 1 << 20, true).await?;
            if r.batches.is_empty() {
                break;
            }
            for b in r.batches {
                for cmd in decode_commands(b)? {
                    if let Err(e) = state.apply(&cmd) {
                        tracing::warn!(error = %e, "metadata command refused on replay");
                    }
                }
            }
            next = r.next_offset;
        }
        let mut store = MetaStore { log, state };
        if store.state.cluster_id.is_empty() {
            let cluster_id = new_cluster_id();
            store
                .commit(vec![Command::InitCluster { cluster_id }])
                .await?;
        }
        Ok(store)
    }

    /// Whether the log accepts writes (not fenced after an fdatasync failure).
    pub fn writable(&self) -> bool {
        self.log.fenced().is_none()
    }

    /// Current state.
    pub fn state(&self) -> &Metadata {
        &self.state
    }

    /// Validates, persists and applies commands in order; one result per command.
    pub async fn commit(
        &mut self,
        cmds: Vec<Command>,
    ) -> anyhow::Result<Vec<Result<(), MetaError>>> {
        let mut trial = self.state.clone();
        let results: Vec<_> = cmds.iter().map(|c| trial.apply(c)).collect();
        let accepted: Vec<&Command> = cmds
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .map(|(c, _)| c)
            .collect();
        if accepted.is_empty() {
            return Ok(results);
        }
        let mut b = BatchBuilder::new(now_ms());
        for c in &accepted {
            b.push(now_ms(), None, Some(&serde_json::to_vec(c)?), &[]);
        }
        let entry = AppendEntry {
            term: RaftTerm(0),
            kind: FrameKind::Data,
            body: b.build(),
        };
        self.log.append_one(&entry)?;
        self.log.flush().await?;
        self.state = trial;
        Ok(results)
    }
}

pub(crate) fn decode_commands(batch: Bytes) -> anyhow::Result<Vec<Command>> {
    let mut buf = batch;
    let set = RecordBatchDecoder::decode(&mut buf)?;
    set.records
        .iter()
        .filter_map(|r| r.value.as_ref())
        .map(|v| serde_json::from_slice(v).map_err(anyhow::Error::from))
        .collect()
}

fn now_ms() -> i64 {
    strand_storage::Clock::now_ms(&SystemClock)
}

pub(crate) fn new_cluster_id() -> String {
    // Kafka cluster ids are 22-character URL-safe base64 of a UUID.
    let id = uuid::Uuid::new_v4();
    let b = id.as_bytes();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits: u128 = u128::from_be_bytes(*b);
    (0..22)
        .map(|_| {
            let c = ALPHABET[(bits & 63) as usize] as char;
            bits >>= 6;
            c
        })
        .collect()
}
