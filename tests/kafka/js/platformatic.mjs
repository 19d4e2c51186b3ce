// @platformatic/kafka against strand: admin createTopics, an idempotent producer (acks=all),
// then a consumer in a group (committed offsets, earliest when none) that reads the first
// half, commits it record by record and leaves, and a second consumer of the same group
// that resumes after the commit and reads the rest. Its consumer fetches with Fetch v13+
// (topics named by id) when the broker offers it.
//
// Usage: node platformatic.mjs <bootstrap> <topic> <group> <count>
// Prints one JSON line with what it saw; exits 1 with the error on stderr on failure.

import {
  Admin,
  Consumer,
  Producer,
  stringDeserializers,
  stringSerializers,
} from '@platformatic/kafka';

const [bootstrap, topic, group, countArg] = process.argv.slice(2);
const count = Number(countArg);
const bootstrapBrokers = [bootstrap];
const TIMEOUT_MS = 60_000;
const out = {};

/** Reads `want` records from a new consumer of `group`, committing each; then closes it. */
async function consume(clientId, want) {
  const consumer = new Consumer({
    clientId,
    groupId: group,
    bootstrapBrokers,
    deserializers: stringDeserializers,
    maxWaitTime: 500,
    timeout: 15_000,
  });
  const got = [];
  try {
    const stream = await consumer.consume({
      topics: [topic],
      mode: 'committed',
      fallbackMode: 'earliest',
      autocommit: false,
      sessionTimeout: 10_000,
      heartbeatInterval: 500,
    });
    const deadline = setTimeout(() => stream.destroy(new Error(`timed out after ${got.length} records`)), TIMEOUT_MS);
    try {
      for await (const m of stream) {
        got.push({ partition: m.partition, offset: Number(m.offset), key: m.key, value: m.value });
        await m.commit();
        if (got.length >= want) {
          break;
        }
      }
    } finally {
      clearTimeout(deadline);
      await stream.close();
    }
  } finally {
    await consumer.close(true);
  }
  return got;
}

async function main() {
  const admin = new Admin({ clientId: 'strand-platformatic-admin', bootstrapBrokers });
  try {
    const created = await admin.createTopics({ topics: [topic], partitions: 2, replicas: 1 });
    out.created = created.map((t) => ({ name: t.name, partitions: t.partitions }));
  } finally {
    await admin.close();
  }

  const producer = new Producer({
    clientId: 'strand-platformatic-producer',
    bootstrapBrokers,
    serializers: stringSerializers,
    idempotent: true,
    acks: -1,
  });
  out.sent = [];
  try {
    // One record per send, to partition i % 2: the offsets are known in advance.
    for (let i = 0; i < count; i++) {
      const r = await producer.send({
        messages: [{ topic, key: `k${i}`, value: `v${i}`, partition: i % 2 }],
      });
      for (const o of r.offsets) {
        out.sent.push({ partition: o.partition, offset: Number(o.offset) });
      }
    }
  } finally {
    await producer.close();
  }

  const half = count / 2;
  out.first = await consume('strand-platformatic-consumer-1', half);
  out.second = await consume('strand-platformatic-consumer-2', count - half);
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  if (e && e.errors) {
    console.error(JSON.stringify(e.errors, null, 1));
  }
  process.exit(1);
});
