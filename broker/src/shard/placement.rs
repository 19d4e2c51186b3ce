//! Which partitions a shard hosts: a published metadata snapshot is applied on every shard,
//! which opens the partitions it now owns (and, in a cluster, hosts their Raft groups),
//! refreshes the configs of those it keeps, and closes and deletes those it no longer owns.
//!
//! Invariant: while a snapshot is applied `applying_metadata` is set (group state may be
//! partial); the snapshot becomes the shard's metadata only after its partitions are open.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::cluster::metadata::Metadata;
use crate::cluster::ClusterHost;
use crate::partition::Partition;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// How often a shard looks whether its first metadata snapshot has been applied.
const FIRST_METADATA_POLL: std::time::Duration = std::time::Duration::from_millis(1);

impl Shard {
    /// Sends a snapshot to every shard (itself included) and waits until all applied it.
    pub async fn publish(self: &Rc<Self>, snapshot: Arc<Metadata>) {
        let calls = (0..self.count).map(|s| self.call(s, Op::ApplyMetadata(snapshot.clone())));
        futures::future::join_all(calls).await;
    }

    /// Runs `Op::ApplyMetadata` or `Op::FirstMetadata`.
    pub(super) async fn execute_placement_op(self: &Rc<Self>, op: Op) -> Reply {
        match op {
            Op::ApplyMetadata(meta) => self.apply_metadata(meta).await,
            Op::FirstMetadata => self.first_metadata().await,
            _ => {}
        }
        Reply::Done
    }

    /// Returns once this shard has applied its first snapshot (then its partitions are
    /// open: the snapshot becomes its metadata only after that), or is stopping.
    async fn first_metadata(&self) {
        while self.metadata().version == 0 && !self.stopping() {
            crate::runtime::task::sleep(FIRST_METADATA_POLL).await;
        }
    }

    /// Returns once every shard has applied its first snapshot: from then on no partition
    /// the metadata names is still opening on its shard (a client served earlier would be
    /// told it does not exist).
    pub async fn every_shard_has_metadata(self: &Rc<Self>) {
        if self.every_shard_had_metadata.get() {
            return;
        }
        let calls = (0..self.count).map(|s| self.call(s, Op::FirstMetadata));
        futures::future::join_all(calls).await;
        // A shard's metadata never goes back to none: once all had some, known for good
        // (a stopping shard answers without: then nothing is kept).
        if !self.stopping() {
            self.every_shard_had_metadata.set(true);
        }
    }

    /// Opens partitions this shard now owns; closes and deletes those it no longer does.
    pub(super) async fn apply_metadata(self: &Rc<Self>, meta: Arc<Metadata>) {
        self.applying_metadata.set(true);
        self.apply_metadata_inner(meta).await;
        self.applying_metadata.set(false);
    }

    async fn apply_metadata_inner(self: &Rc<Self>, meta: Arc<Metadata>) {
        let mut wanted: HashMap<(String, i32), ()> = HashMap::new();
        if self.clustered() {
            for k in crate::cluster::hosted_here(&**self, &meta) {
                wanted.insert(k, ());
            }
        } else {
            for (name, t) in &meta.topics {
                for (p, &s) in t.shards.iter().enumerate() {
                    if s as usize == self.id {
                        wanted.insert((name.clone(), p as i32), ());
                    }
                }
            }
        }
        let before = self.metadata();
        let stale: Vec<(String, i32)> = self
            .partition_keys()
            .into_iter()
            .filter(|k| !wanted.contains_key(k))
            .collect();
        for (topic, p) in stale {
            crate::cluster::unhost_partition(&**self, &before, &topic, p);
            if let Some(part) = self.remove_partition(&topic, p) {
                delete_partition_dir(part).await;
            }
        }
        for ((topic, p), ()) in wanted {
            // The topic's overrides over this node's dynamic log defaults.
            let configs = crate::cluster::broker_config::topic_overrides(
                &meta.broker_configs,
                self.config.node_id,
                &meta
                    .topics
                    .get(&topic)
                    .map(|t| t.configs.clone())
                    .unwrap_or_default(),
            );
            if let Some(part) = self.partition(&topic, p) {
                let (lc, max) = crate::cluster::topic_config::log_config(&self.config, &configs);
                part.set_config(lc, max);
                self.apply_running_configs(&part, &configs);
                if self.clustered() {
                    crate::cluster::refresh_partition(&**self, &meta, &part);
                }
                continue;
            }
            if let Err(e) = self.open_partition(&meta, &topic, p, &configs).await {
                tracing::error!(%topic, partition = p, error = %e, "cannot open partition");
                continue;
            }
            if let Some(part) = self.partition(&topic, p).filter(|_| self.clustered()) {
                crate::cluster::host_partition(self, &meta, part).await;
            }
        }
        if let Some(rep) = self.replicator() {
            rep.learn_peers(crate::cluster::peer_addrs(&meta));
        }
        let me = self.config.node_id;
        if self.id == 0 && before.nodes.contains_key(&me) && !meta.nodes.contains_key(&me) {
            tracing::error!(
                node = me,
                "this node was removed from the cluster (UnregisterBroker): it is not ready \
                 and hosts nothing; stop it (a restart registers it again)"
            );
        }
        self.set_metadata(meta);
    }
}

/// Deletes a partition's directory once this shard no longer owns it (the last reference
/// to the partition, so its files are closed first).
async fn delete_partition_dir(part: Rc<Partition>) {
    let dir = part.log().dir().to_path_buf();
    drop(part);
    // Awaited before the snapshot opens anything: a topic created again under the same
    // name opens the same directory.
    if let Err(e) = strand_storage::io::remove_dir_all(&dir).await {
        tracing::warn!(dir = %dir.display(), error = %e, "removing deleted partition");
    }
}
