//! The one-time upgrade of a single-node broker's data directory into a cluster: on shard 0
//! of a one-seed cluster started on it, the old metadata log's topics, cluster id and
//! producer-id reservation become controller commands, then the old log is set aside
//! (renamed with `.adopted`) and never read again.
//!
//! Invariant: adoption commits every command before it renames the old log, so a crash in
//! between adopts again (each command is skipped when the cluster already holds it).

use std::rc::Rc;

use strand_storage::LogConfig;

use super::meta_commands;
use crate::cluster::metadata::Command;
use crate::cluster::ClusterHost;

/// The metadata log a single-node broker keeps (`metastore`), not yet adopted.
pub(super) fn single_node_metadata_dir(c: &crate::common::config::Config) -> std::path::PathBuf {
    c.data_dir.join(crate::cluster::metastore::METADATA_DIR)
}

/// Where an adopted single-node metadata log is kept (never read again).
const ADOPTED_SUFFIX: &str = ".adopted";

/// Shard 0 of a one-seed cluster started on a single-node broker's data directory (the
/// upgrade): its topics, cluster id and producer-id reservation become controller
/// commands (each partition a Raft group of this node alone, over the same log, whose
/// term-0 frames count as committed), then the old metadata log is set aside. Runs before
/// registration names the cluster.
pub async fn adopt_single_node_data<H: ClusterHost>(shard: &Rc<H>) -> anyhow::Result<()> {
    let c = shard.config();
    let dir = single_node_metadata_dir(c);
    if !dir.exists() {
        return Ok(());
    }
    let lc = LogConfig {
        allow_buffered_io: c.allow_buffered_io,
        ..LogConfig::default()
    };
    let old = crate::cluster::metastore::MetaStore::open(&c.data_dir, lc)
        .await?
        .state()
        .clone();
    let committed = shard.committed_metadata();
    let mut cmds = Vec::new();
    if committed.cluster_id.is_empty() && !old.cluster_id.is_empty() {
        cmds.push(Command::InitCluster {
            cluster_id: old.cluster_id.clone(),
        });
    }
    for (name, t) in &old.topics {
        match committed.topics.get(name) {
            Some(have) if have.id == t.id => continue,
            Some(_) => anyhow::bail!(
                "the cluster already has a topic '{name}' other than this data directory's"
            ),
            None => cmds.push(Command::CreateTopic {
                name: name.clone(),
                id: t.id,
                shards: t.shards.clone(),
                configs: t.configs.clone(),
                replicas: vec![vec![c.node_id]; t.shards.len()],
            }),
        }
    }
    if old.producer_ids_reserved_to > committed.producer_ids_reserved_to {
        cmds.push(Command::ReserveProducerIds {
            up_to: old.producer_ids_reserved_to,
            owner: Some(c.node_id),
        });
    }
    let topics = old.topics.len();
    if !cmds.is_empty() {
        for r in meta_commands(shard, cmds).await {
            r.map_err(|e| anyhow::anyhow!("adopting the single-node metadata: {e}"))?;
        }
    }
    let mut to = dir.clone().into_os_string();
    to.push(ADOPTED_SUFFIX);
    strand_storage::io::rename(&dir, std::path::Path::new(&to)).await?;
    strand_storage::io::fsync_dir_async(&c.data_dir).await?;
    tracing::info!(
        topics,
        "adopted a single-node broker's topics into the cluster"
    );
    Ok(())
}
