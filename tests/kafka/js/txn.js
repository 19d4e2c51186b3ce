// Transactions with kafkajs against strand (driven by tests/kafka/test_transactions_clients.py).
// Runs one scenario, which creates its topics, and prints one JSON line with what it saw;
// exits 1 with the error on stderr on failure. The scenarios and their output are those of
// tests/kafka/java/TxnCheck.java:
// - visibility <topic>: on 2 partitions, a committed transaction (c0..c5, record i in
//   partition i % 2), an aborted one (a0..a5, acknowledged before the abort), then a
//   committed one with "end" in each partition. Prints the records read with
//   read_committed and with read_uncommitted, each read until "end" in every partition:
//   {"read_committed": [...], "read_uncommitted": [...]};
// - atomic <topicA> <topicB>: on 3 partitions each, transactions n = 0..9 writing "<n>"
//   to every partition of both topics, the odd ones aborted, then "end" everywhere.
//   Prints {"read_committed": [...]};
// - offsets <topic> <group>: a transaction producing to the topic with
//   transaction.sendOffsets(offset 5) is aborted, another with offset 7 committed. Prints
//   the group's committed offset (admin.fetchOffsets, null for none) after each:
//   {"after_abort": ..., "after_commit": ...}.
// A record is [topic, partition, offset, value]. kafkajs has no assign(): it reads through
// a consumer of a new group.
//
// Usage: node txn.js <bootstrap> <scenario> <args>...

'use strict';

const crypto = require('crypto');
const { Kafka, logLevel } = require('kafkajs');

async function waitFor(cond, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function createTopics(kafka, numPartitions, topics) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({
      topics: topics.map((topic) => ({ topic, numPartitions, replicationFactor: 1 })),
      waitForLeaders: true,
    });
    if (!created) throw new Error(`createTopics ${topics}: already exists`);
  } finally {
    await admin.disconnect();
  }
}

async function txnProducer(kafka, transactionalId) {
  const producer = kafka.producer({
    transactionalId, idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false,
  });
  await producer.connect();
  return producer;
}

// One transaction writing `topicMessages` (sendBatch's), each acknowledged before it ends.
async function transaction(producer, topicMessages, commit) {
  const txn = await producer.transaction();
  await txn.sendBatch({ topicMessages, acks: -1 });
  await (commit ? txn.commit() : txn.abort());
}

// `value` in each of the first `partitions` partitions of each topic.
function everywhere(value, partitions, topics) {
  return topics.map((topic) => ({
    topic, messages: [...Array(partitions).keys()].map((partition) => ({ partition, value })),
  }));
}

// Records prefix0..prefix5, record i in partition i % 2.
function six(topic, prefix) {
  const messages = [...Array(6).keys()].map((i) => ({ partition: i % 2, value: `${prefix}${i}` }));
  return [{ topic, messages }];
}

// Every record of `topics` (`partitions` each) from the start, read until "end" in each.
async function readToEnd(kafka, topics, partitions, readUncommitted) {
  const consumer = kafka.consumer({
    groupId: `reader-${crypto.randomUUID()}`, readUncommitted, maxWaitTimeInMs: 200,
  });
  const got = [];
  const ended = new Set();
  await consumer.connect();
  try {
    await consumer.subscribe({ topics, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const value = message.value.toString();
        got.push([topic, partition, Number(message.offset), value]);
        if (value === 'end') ended.add(`${topic}/${partition}`);
      },
    });
    const isolation = readUncommitted ? 'read_uncommitted' : 'read_committed';
    await waitFor(() => ended.size === topics.length * partitions, 30000, `${isolation}: `
      + `"end" in every partition (only in ${[...ended]}, read ${JSON.stringify(got)})`);
  } finally {
    await consumer.disconnect();
  }
  return got;
}

async function visibility(kafka, topic) {
  await createTopics(kafka, 2, [topic]);
  const producer = await txnProducer(kafka, `tid-${topic}`);
  try {
    await transaction(producer, six(topic, 'c'), true);
    await transaction(producer, six(topic, 'a'), false);
    await transaction(producer, everywhere('end', 2, [topic]), true);
  } finally {
    await producer.disconnect();
  }
  // Both at once: each waits for its new group's first rebalance.
  const [committed, uncommitted] = await Promise.all([
    readToEnd(kafka, [topic], 2, false), readToEnd(kafka, [topic], 2, true)]);
  return { read_committed: committed, read_uncommitted: uncommitted };
}

async function atomic(kafka, a, b) {
  await createTopics(kafka, 3, [a, b]);
  const producer = await txnProducer(kafka, `tid-${a}`);
  try {
    for (let n = 0; n < 10; n++) {
      await transaction(producer, everywhere(`${n}`, 3, [a, b]), n % 2 === 0);
    }
    await transaction(producer, everywhere('end', 3, [a, b]), true);
  } finally {
    await producer.disconnect();
  }
  return { read_committed: await readToEnd(kafka, [a, b], 3, false) };
}

// A transaction producing one record and sending `offset` of the topic's partition 0 for `group`.
async function transactionWithOffset(producer, topic, group, offset, commit) {
  const txn = await producer.transaction();
  await txn.send({ topic, acks: -1, messages: [{ partition: 0, value: 'x' }] });
  const partitions = [{ partition: 0, offset: `${offset}` }];
  await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions }] });
  await (commit ? txn.commit() : txn.abort());
}

async function offsets(kafka, topic, group) {
  await createTopics(kafka, 1, [topic]);
  const producer = await txnProducer(kafka, `tid-${topic}`);
  const admin = kafka.admin();
  await admin.connect();
  // The group's committed offset of partition 0, null for none (kafkajs says -1).
  const committed = async () => {
    const [{ partitions }] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const { offset } = partitions.find((p) => p.partition === 0);
    return offset === '-1' ? null : Number(offset);
  };
  try {
    await transactionWithOffset(producer, topic, group, 5, false);
    const afterAbort = await committed();
    await transactionWithOffset(producer, topic, group, 7, true);
    return { after_abort: afterAbort, after_commit: await committed() };
  } finally {
    await admin.disconnect();
    await producer.disconnect();
  }
}

const SCENARIOS = { visibility, atomic, offsets };

async function main() {
  const [bootstrap, scenario, ...args] = process.argv.slice(2);
  if (!SCENARIOS[scenario]) throw new Error(`unknown scenario ${scenario}`);
  const kafka = new Kafka({
    clientId: 'strand-kafkajs-txn',
    brokers: [bootstrap],
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 5 },
  });
  const out = await SCENARIOS[scenario](kafka, ...args);
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((e) => {
  process.stderr.write(`kafkajs txn failed: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
