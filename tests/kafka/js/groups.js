// kafkajs consumer groups against strand (driven by tests/kafka/test_groups.py):
// 1. produce n1 keyed records (acks=-1), a consumer with groupId reads them all, commits;
// 2. produce n2 more, a new consumer of the same group reads only those;
// 3. on the second broker, two consumers of one group split the partitions, one
//    disconnects (LeaveGroup), the other ends up with all of them.
//
// Usage: node groups.js <bootstrap> <topic> <group> <bootstrap3> <topic3> <group3> <n1> <n2>
// Prints one JSON line with what it saw; exits 1 with the error on stderr on failure.

'use strict';

const { Kafka, logLevel } = require('kafkajs');

function client(bootstrap, id) {
  return new Kafka({
    clientId: `strand-kafkajs-groups-${id}`,
    brokers: bootstrap.split(','),
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 5 },
  });
}

async function waitFor(cond, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function produce(kafka, topic, from, to) {
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const messages = [];
    for (let i = from; i < to; i++) messages.push({ key: `k${i}`, value: `v${i}` });
    const res = await producer.send({ topic, acks: -1, messages });
    for (const r of res) if (r.errorCode !== 0) throw new Error(`send: ${JSON.stringify(r)}`);
  } finally {
    await producer.disconnect();
  }
}

// Reads n records with a group consumer, commits what it read, disconnects.
async function consumeCommit(kafka, topic, group, n) {
  const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 500 });
  await consumer.connect();
  const got = [];
  let first = null;
  const next = {};
  try {
    const t0 = Date.now();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (first === null) first = (Date.now() - t0) / 1000;
        got.push([partition, Number(message.offset), message.key.toString(), message.value.toString()]);
        next[partition] = Number(message.offset) + 1;
      },
    });
    await waitFor(() => got.length >= n, 30000, `${n} records (have ${got.length})`);
    await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => (
      { topic, partition: Number(partition), offset: String(offset) })));
  } finally {
    await consumer.disconnect();
  }
  return { got, first };
}

async function main() {
  const [bootstrap, topic, group, bootstrap3, topic3, group3, n1Arg, n2Arg] = process.argv.slice(2);
  const n1 = Number(n1Arg);
  const n2 = Number(n2Arg);
  const kafka = client(bootstrap, 'a');
  const out = {};

  await produce(kafka, topic, 0, n1);
  const r1 = await consumeCommit(kafka, topic, group, n1);
  out.p1 = r1.got;
  out.first_s = r1.first;
  await produce(kafka, topic, n1, n1 + n2);
  out.p2 = (await consumeCommit(kafka, topic, group, n2)).got;

  // Phase 3.
  const kafka3 = client(bootstrap3, 'b');
  const assigned = [null, null];
  const members = [0, 1].map((i) => {
    const c = kafka3.consumer({
      groupId: group3, sessionTimeout: 6000, heartbeatInterval: 300, maxWaitTimeInMs: 200,
      rebalanceTimeout: 10000,
    });
    c.on(c.events.GROUP_JOIN, (e) => {
      assigned[i] = (e.payload.memberAssignment[topic3] || []).slice().sort();
    });
    return c;
  });
  let left = false;
  try {
    const t0 = Date.now();
    for (const c of members) {
      await c.connect();
      await c.subscribe({ topics: [topic3], fromBeginning: true });
      await c.run({ autoCommit: false, eachMessage: async () => {} });
    }
    const all = (a) => a !== null && a.length > 0;
    await waitFor(() => all(assigned[0]) && all(assigned[1])
      && assigned[0].length + assigned[1].length === 3
      && new Set([...assigned[0], ...assigned[1]]).size === 3, 30000,
    `two members to split the partitions (${JSON.stringify(assigned)})`);
    out.split = [assigned[0], assigned[1]];
    out.split_s = (Date.now() - t0) / 1000;
    await members[1].disconnect();
    left = true;
    const t1 = Date.now();
    await waitFor(() => assigned[0] && assigned[0].length === 3, 30000,
      `the remaining member to own all partitions (${JSON.stringify(assigned[0])})`);
    out.after_leave = assigned[0];
    out.takeover_s = (Date.now() - t1) / 1000;
  } finally {
    await members[0].disconnect();
    if (!left) await members[1].disconnect();
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((e) => {
  process.stderr.write(`kafkajs groups failed: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
