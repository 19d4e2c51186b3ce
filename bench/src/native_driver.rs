//! `--protocol native`: load through Strand's native protocol with `strand-client`.
//!
//! Batches are encoded exactly as for the Kafka driver (`kafka_driver::encode_batch`) and
//! sent with [`strand_client::Client::produce_batches`] straight to the shards that own
//! their partitions: what the harness sends at once goes as one request per shard (as the
//! Kafka driver sends one Produce per broker), at most `max_in_flight` such sends in flight
//! per producer. Topic
//! creation and deletion use the node's Kafka listener, which the handshake announces:
//! the native protocol has no topic administration.
//! Consumed bytes count keys and values (the client decodes records), not batch bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use strand_client::{Client, ClientConfig, Consumer, ConsumerConfig, Offset, TopicBatch};
use tokio::sync::Semaphore;

use crate::driver::{
    Acked, Acks, BoxFut, ConsumeSession, Driver, DriverError, Fetched, PartitionBatch,
    ProduceSession, ProducerOpts, SentRequest, StartAt, TopicSpec,
};
use crate::kafka_driver::{encode_batch, KafkaDriver};

/// A produce request's deadline (the broker answers acks=all after its group commit).
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);

fn client_error(e: strand_client::Error) -> DriverError {
    match e {
        strand_client::Error::Broker { code, message, .. } => DriverError::Broker {
            api: "native",
            code,
            name: message,
        },
        strand_client::Error::Timeout { timeout_ms } => {
            DriverError::Timeout(format!("{timeout_ms} ms"))
        }
        strand_client::Error::Closed { addr, .. } => DriverError::ConnectionClosed {
            addr: addr.to_string(),
        },
        other => DriverError::Protocol(other.to_string()),
    }
}

/// A Strand node reached through its native port.
pub struct NativeDriver {
    client: Client,
    admin: KafkaDriver,
}

impl NativeDriver {
    /// Handshakes with `bootstrap` (the native port, 9093 by default) and connects to the
    /// Kafka listener it announces for topic administration.
    pub async fn connect(bootstrap: &str) -> Result<NativeDriver, DriverError> {
        let client = Client::connect(ClientConfig::new(bootstrap))
            .await
            .map_err(client_error)?;
        let kafka = client.kafka_bootstrap().ok_or_else(|| {
            DriverError::Unsupported("the node announced no Kafka listener".to_string())
        })?;
        let admin = KafkaDriver::connect(&kafka).await?;
        Ok(NativeDriver { client, admin })
    }
}

impl Driver for NativeDriver {
    fn ensure_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFut<'a, Result<i32, DriverError>> {
        Box::pin(async move {
            let n = self.admin.ensure_topic(topic).await?;
            self.client
                .refresh_metadata(&[topic.name.as_str()])
                .await
                .map_err(client_error)?;
            Ok(n)
        })
    }

    fn delete_topic<'a>(&'a self, topic: &'a str) -> BoxFut<'a, Result<(), DriverError>> {
        self.admin.delete_topic(topic)
    }

    fn producer<'a>(
        &'a self,
        opts: &'a ProducerOpts,
    ) -> BoxFut<'a, Result<Box<dyn ProduceSession>, DriverError>> {
        Box::pin(async move {
            let p: Box<dyn ProduceSession> = Box::new(NativeProducer {
                client: self.client.clone(),
                opts: opts.clone(),
                slots: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
                buf: BytesMut::new(),
            });
            Ok(p)
        })
    }

    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        partitions: Vec<i32>,
        start: StartAt,
        keep_values: bool,
    ) -> BoxFut<'a, Result<Box<dyn ConsumeSession>, DriverError>> {
        Box::pin(async move {
            let mut consumer = self.client.consumer(ConsumerConfig::default());
            let at = match start {
                StartAt::Earliest => Offset::Earliest,
                StartAt::Latest => Offset::Latest,
            };
            for p in partitions {
                consumer.assign(topic, p, at).await.map_err(client_error)?;
            }
            let c: Box<dyn ConsumeSession> = Box::new(NativeConsumer {
                consumer,
                keep_values,
            });
            Ok(c)
        })
    }
}

struct NativeProducer {
    client: Client,
    opts: ProducerOpts,
    slots: Arc<Semaphore>,
    buf: BytesMut,
}

impl ProduceSession for NativeProducer {
    fn send<'a>(
        &'a mut self,
        batches: &'a [PartitionBatch],
    ) -> BoxFut<'a, Result<Vec<SentRequest>, DriverError>> {
        Box::pin(async move {
            let acks = match self.opts.acks {
                Acks::None => strand_client::Acks::None,
                Acks::Leader => strand_client::Acks::Leader,
                Acks::All => strand_client::Acks::All,
            };
            let mut encoded = Vec::with_capacity(batches.len());
            for batch in batches {
                encoded.push((
                    batch.partition,
                    encode_batch(batch, self.opts.codec, &mut self.buf)?,
                ));
            }
            let permit = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| DriverError::Protocol("producer closed".into()))?;
            let client = self.client.clone();
            let topic = self.opts.topic.clone();
            let sent_at = Instant::now();
            let task = tokio::spawn(async move {
                let batches: Vec<TopicBatch<'_>> = encoded
                    .into_iter()
                    .map(|(partition, batch)| TopicBatch {
                        topic: &topic,
                        partition,
                        batch,
                    })
                    .collect();
                let r = client
                    .produce_batches(acks, &batches, PRODUCE_TIMEOUT)
                    .await;
                drop(permit);
                (r, Instant::now())
            });
            let answer = Box::pin(async move {
                let (results, at) = task
                    .await
                    .map_err(|e| DriverError::Protocol(format!("send task: {e}")))?;
                let failed = results
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, r)| r.err().map(|e| (i, client_error(e))))
                    .collect();
                Ok(Acked { at, failed })
            });
            Ok(vec![SentRequest {
                batch_indices: (0..batches.len()).collect(),
                sent_at,
                answer,
            }])
        })
    }
}

struct NativeConsumer {
    consumer: Consumer,
    keep_values: bool,
}

impl ConsumeSession for NativeConsumer {
    fn poll(&mut self) -> BoxFut<'_, Result<Fetched, DriverError>> {
        Box::pin(async move {
            let records = self.consumer.poll().await.map_err(client_error)?;
            let mut out = Fetched {
                at: Some(Instant::now()),
                ..Fetched::default()
            };
            for r in records {
                out.records += 1;
                out.bytes += (r.key.as_ref().map_or(0, |k| k.len())
                    + r.value.as_ref().map_or(0, |v| v.len())) as u64;
                if self.keep_values {
                    if let Some(v) = r.value {
                        out.values.push(v);
                    }
                }
            }
            Ok(out)
        })
    }
}
