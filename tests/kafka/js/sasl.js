// kafkajs over strand's SASL_PLAINTEXT listener (driven by tests/kafka/test_sasl_clients.py):
// produces <count> records to partition 0 of <topic> (which exists) authenticated with
// <mechanism> (plain, scram-sha-256, scram-sha-512) as <user>/<password>, then reads the
// partition's offsets with the admin client over the same listener. Prints one JSON line
// {"high": "<end offset>"}; exits 1 with the error on stderr on failure.
//
// Usage: node sasl.js <bootstrap> <topic> <count> <mechanism> <user> <password>

'use strict';

const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, countArg, mechanism, username, password] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: 'strand-kafkajs-sasl',
    brokers: [bootstrap],
    sasl: { mechanism, username, password },
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 2 },
  });
  const producer = kafka.producer();
  await producer.connect();
  try {
    const messages = [];
    for (let i = 0; i < Number(countArg); i++) messages.push({ partition: 0, value: `v${i}` });
    await producer.send({ topic, acks: -1, messages });
  } finally {
    await producer.disconnect();
  }
  const admin = kafka.admin();
  await admin.connect();
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    const p0 = offsets.find((o) => o.partition === 0);
    process.stdout.write(`${JSON.stringify({ high: p0.high })}\n`);
  } finally {
    await admin.disconnect();
  }
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
