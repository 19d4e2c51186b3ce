// kafkajs against strand: admin (createTopics, fetchTopicMetadata, fetchTopicOffsets,
// fetchTopicOffsetsByTimestamp) and the producer. kafkajs has no group-less consumer (its
// Consumer always joins a group, and strand has no group coordinator yet), so the records
// are read back by the Python side with another client.
//
// Usage: node check.js <bootstrap> <topic> <count>
// Prints one JSON line with what it saw; exits 1 with the error on stderr on failure.

'use strict';

const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, countArg] = process.argv.slice(2);
  const count = Number(countArg);
  const kafka = new Kafka({
    clientId: 'strand-kafkajs-check',
    brokers: [bootstrap],
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 3 },
  });
  const out = {};

  const admin = kafka.admin();
  await admin.connect();
  try {
    out.created = await admin.createTopics({
      topics: [{ topic, numPartitions: 2, replicationFactor: 1 }],
      waitForLeaders: true,
    });
    // kafkajs turns TOPIC_ALREADY_EXISTS into `false`.
    out.createdAgain = await admin.createTopics({
      topics: [{ topic, numPartitions: 2, replicationFactor: 1 }],
    });
    const md = await admin.fetchTopicMetadata({ topics: [topic] });
    out.metadata = md.topics.map((t) => ({
      name: t.name,
      partitions: t.partitions
        .map((p) => ({ partition: p.partitionId, leader: p.leader, error: p.partitionErrorCode }))
        .sort((a, b) => a.partition - b.partition),
    }));

    const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false });
    await producer.connect();
    const t0 = Date.now();
    try {
      out.sends = [];
      // Two sends: the second's base offsets continue where the first ended.
      for (const [from, to] of [[0, count / 2], [count / 2, count]]) {
        const messages = [];
        for (let i = from; i < to; i++) {
          messages.push({ key: `k${i}`, value: `v${i}`, partition: i % 2, timestamp: String(t0 + i) });
        }
        const res = await producer.send({ topic, acks: -1, messages });
        out.sends.push(
          res
            .map((r) => ({ partition: r.partition, error: r.errorCode, baseOffset: Number(r.baseOffset) }))
            .sort((a, b) => a.partition - b.partition),
        );
      }
    } finally {
      await producer.disconnect();
    }

    out.offsets = (await admin.fetchTopicOffsets(topic))
      .map((o) => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) }))
      .sort((a, b) => a.partition - b.partition);
    // Partition p holds records p, p+2, ...; timestamp t0+count/2 is record count/2, which
    // is in partition (count/2)%2 at offset floor(count/4).
    out.byTimestamp = (await admin.fetchTopicOffsetsByTimestamp(topic, t0 + count / 2))
      .map((o) => ({ partition: o.partition, offset: Number(o.offset) }))
      .sort((a, b) => a.partition - b.partition);
  } finally {
    await admin.disconnect();
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((e) => {
  process.stderr.write(`kafkajs check failed: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
