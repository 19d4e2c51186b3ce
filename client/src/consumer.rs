//! The consumer: assigned partitions, positions, long-poll fetch, and group offsets.
//!
//! Invariant: a partition's position only moves forward past records returned by `poll`
//! (or by an explicit `seek`); fetches go to the shard that owns each partition, one
//! request per shard per poll, all shards in parallel.

use std::collections::BTreeMap;
use std::time::Duration;

use strand_wire::native::generated::*;

use crate::client::Client;
use crate::error::{Error, Result};
pub use crate::records::ConsumedRecord;

/// Where to start reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    /// The log start.
    Earliest,
    /// The end: only records produced from now on.
    Latest,
    /// This offset.
    At(i64),
    /// The group's committed offset, else `Earliest`.
    Committed,
}

/// Consumer settings.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Group id for committing offsets (no membership protocol: partitions are assigned).
    pub group: Option<String>,
    /// Longest a fetch waits for data.
    pub max_wait: Duration,
    /// A fetch returns once this many bytes are there (or `max_wait` passed).
    pub min_bytes: i32,
    /// Most bytes per partition per fetch.
    pub partition_max_bytes: i32,
    /// Most bytes per fetch.
    pub max_bytes: i32,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group: None,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            partition_max_bytes: 1024 * 1024,
            max_bytes: 50 * 1024 * 1024,
        }
    }
}

/// Reads assigned partitions.
#[derive(Debug)]
pub struct Consumer {
    client: Client,
    config: ConsumerConfig,
    positions: BTreeMap<(String, i32), i64>,
}

impl Consumer {
    pub(crate) fn new(client: Client, config: ConsumerConfig) -> Consumer {
        Consumer {
            client,
            config,
            positions: BTreeMap::new(),
        }
    }

    /// Starts reading `topic`-`partition` at `start`.
    pub async fn assign(&mut self, topic: &str, partition: i32, start: Offset) -> Result<()> {
        let offset = match start {
            Offset::At(o) => o,
            Offset::Earliest => self.list_offset(topic, partition, -2).await?,
            Offset::Latest => self.list_offset(topic, partition, -1).await?,
            Offset::Committed => match self.committed(topic, partition).await? {
                Some(o) => o,
                None => self.list_offset(topic, partition, -2).await?,
            },
        };
        self.positions
            .insert((topic.to_string(), partition), offset);
        Ok(())
    }

    /// Moves the position of an assigned partition.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: i64) -> Result<()> {
        match self.positions.get_mut(&(topic.to_string(), partition)) {
            Some(p) => {
                *p = offset;
                Ok(())
            }
            None => Err(Error::UnknownPartition {
                topic: topic.to_string(),
                partition,
            }),
        }
    }

    /// The next offset `poll` reads from a partition.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.positions.get(&(topic.to_string(), partition)).copied()
    }

    /// The offset at `timestamp_ms` (-2 earliest, -1 latest) from the owning shard.
    pub async fn list_offset(&self, topic: &str, partition: i32, timestamp_ms: i64) -> Result<i64> {
        for _ in 0..2 {
            let conn = self.client.shard_connection(topic, partition).await?;
            let req = BodyT::ListOffsetsRequest(Box::new(ListOffsetsRequestT {
                partitions: Some(vec![ListOffsetsPartitionT {
                    topic: Some(topic.to_string()),
                    partition,
                    timestamp_ms,
                }]),
            }));
            let BodyT::ListOffsetsResponse(r) =
                conn.request(req, self.client.request_timeout()).await?
            else {
                return Err(Error::Protocol(
                    "list offsets answered with another message".into(),
                ));
            };
            let p = r
                .partitions
                .and_then(|mut v| v.pop())
                .ok_or_else(|| Error::Protocol("list offsets without the partition".into()))?;
            match p.error {
                None => return Ok(p.offset),
                Some(e) if e.moved_to_shard >= 0 => {
                    self.client
                        .moved(topic, partition, e.moved_to_shard, e.moved_to_port)
                }
                Some(e) => return Err(Error::from_wire(&e)),
            }
        }
        Err(Error::Protocol(format!("{topic}-{partition} keeps moving")))
    }

    /// Fetches from every assigned partition (waiting up to `max_wait` for data) and
    /// returns the records, advancing positions past them.
    pub async fn poll(&mut self) -> Result<Vec<ConsumedRecord>> {
        let mut by_shard: BTreeMap<u32, Vec<FetchPartitionT>> = BTreeMap::new();
        for ((topic, partition), offset) in &self.positions {
            if self.client.shard_of(topic, *partition).is_none() {
                self.client.refresh_metadata(&[topic]).await?;
            }
            let shard =
                self.client
                    .shard_of(topic, *partition)
                    .ok_or_else(|| Error::UnknownPartition {
                        topic: topic.clone(),
                        partition: *partition,
                    })?;
            by_shard.entry(shard).or_default().push(FetchPartitionT {
                topic: Some(topic.clone()),
                partition: *partition,
                offset: *offset,
                max_bytes: self.config.partition_max_bytes,
            });
        }
        let fetches = by_shard.into_values().map(|parts| self.fetch_shard(parts));
        let answers = futures::future::join_all(fetches).await;
        let mut out = Vec::new();
        for answer in answers {
            for (p, records) in answer? {
                let topic = p.topic.clone().unwrap_or_default();
                if let Some(e) = p.error.as_deref() {
                    if e.moved_to_shard >= 0 {
                        self.client
                            .moved(&topic, p.partition, e.moved_to_shard, e.moved_to_port);
                        continue;
                    }
                    if e.retriable {
                        continue;
                    }
                    return Err(Error::from_wire(e));
                }
                let Some(pos) = self.positions.get_mut(&(topic.clone(), p.partition)) else {
                    continue;
                };
                let decoded = crate::records::decode(&topic, p.partition, records, *pos)?;
                if let Some(next) = decoded.next_offset {
                    *pos = next;
                }
                out.extend(decoded.records);
            }
        }
        Ok(out)
    }

    /// Fetches `parts` from their shard: each partition's answer with its records (sliced
    /// out of the response frame's trailer, not copied).
    async fn fetch_shard(
        &self,
        parts: Vec<FetchPartitionT>,
    ) -> Result<Vec<(FetchPartitionResultT, bytes::Bytes)>> {
        let first = parts
            .first()
            .map(|p| (p.topic.clone().unwrap_or_default(), p.partition));
        let Some((topic, partition)) = first else {
            return Ok(Vec::new());
        };
        let conn = self.client.shard_connection(&topic, partition).await?;
        let max_wait_ms = i32::try_from(self.config.max_wait.as_millis()).unwrap_or(i32::MAX);
        let req = BodyT::FetchRequest(Box::new(FetchRequestT {
            max_wait_ms,
            min_bytes: self.config.min_bytes,
            max_bytes: self.config.max_bytes,
            isolation: Isolation::ReadUncommitted,
            partitions: Some(parts),
            records_in_trailer: true,
        }));
        let timeout = self.client.request_timeout() + self.config.max_wait;
        let (BodyT::FetchResponse(r), mut trailer) =
            conn.request_with_trailer(req, timeout).await?
        else {
            return Err(Error::Protocol(
                "fetch answered with another message".into(),
            ));
        };
        let mut out = Vec::new();
        for mut p in r.partitions.unwrap_or_default() {
            let records = if p.trailer_bytes > 0 {
                strand_wire::native::take_trailer(&mut trailer, p.trailer_bytes)
                    .map_err(|e| Error::Protocol(e.to_string()))?
            } else {
                bytes::Bytes::from(p.records.take().unwrap_or_default())
            };
            out.push((p, records));
        }
        Ok(out)
    }

    fn group(&self) -> Result<&str> {
        self.config
            .group
            .as_deref()
            .ok_or_else(|| Error::Config("offsets need ConsumerConfig::group".into()))
    }

    /// Commits the current positions under the group.
    pub async fn commit(&self) -> Result<()> {
        let offsets: Vec<(String, i32, i64)> = self
            .positions
            .iter()
            .map(|((t, p), o)| (t.clone(), *p, *o))
            .collect();
        self.commit_offsets(&offsets).await
    }

    /// Commits `(topic, partition, next offset to read)` under the group.
    pub async fn commit_offsets(&self, offsets: &[(String, i32, i64)]) -> Result<()> {
        let req = BodyT::CommitOffsetsRequest(Box::new(CommitOffsetsRequestT {
            group: Some(self.group()?.to_string()),
            offsets: Some(
                offsets
                    .iter()
                    .map(|(t, p, o)| GroupOffsetT {
                        topic: Some(t.clone()),
                        partition: *p,
                        offset: *o,
                        metadata: None,
                    })
                    .collect(),
            ),
        }));
        let conn = self.client.control().await?;
        let BodyT::CommitOffsetsResponse(r) =
            conn.request(req, self.client.request_timeout()).await?
        else {
            return Err(Error::Protocol(
                "commit answered with another message".into(),
            ));
        };
        match r
            .partitions
            .unwrap_or_default()
            .into_iter()
            .find_map(|p| p.error)
        {
            Some(e) => Err(Error::from_wire(&e)),
            None => Ok(()),
        }
    }

    /// The group's committed offset of a partition (`None` if none).
    pub async fn committed(&self, topic: &str, partition: i32) -> Result<Option<i64>> {
        let req = BodyT::FetchOffsetsRequest(Box::new(FetchOffsetsRequestT {
            group: Some(self.group()?.to_string()),
            partitions: Some(vec![TopicPartitionT {
                topic: Some(topic.to_string()),
                partition,
            }]),
        }));
        let conn = self.client.control().await?;
        let BodyT::FetchOffsetsResponse(r) =
            conn.request(req, self.client.request_timeout()).await?
        else {
            return Err(Error::Protocol(
                "offset fetch answered with another message".into(),
            ));
        };
        if let Some(e) = r.error.as_deref() {
            return Err(Error::from_wire(e));
        }
        let o = r
            .offsets
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.topic.as_deref() == Some(topic) && o.partition == partition)
            .map_or(-1, |o| o.offset);
        Ok((o >= 0).then_some(o))
    }
}
