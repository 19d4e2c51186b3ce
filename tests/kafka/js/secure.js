// kafkajs over one of strand's secured listeners (driven by tests/kafka/test_tls_clients.py):
// produces <count> records to partition 0 of <topic> (which exists), consumes them in
// group <group>, commits, and reads the group's committed offset with the admin client.
// The TLS and SASL settings come as JSON in argv: {"ca": path, "cert": path, "key": path,
// "sasl": {"mechanism", "username", "password"}} (cert/key for mutual TLS, sasl optional).
// Prints one JSON line {"consumed": n, "committed": "<offset>"}; exits 1 with the error
// on stderr on failure.
//
// Usage: node secure.js <bootstrap> <topic> <group> <count> <settings json>

'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, group, countArg, settingsArg] = process.argv.slice(2);
  const settings = JSON.parse(settingsArg);
  const count = Number(countArg);
  const ssl = { ca: [fs.readFileSync(settings.ca, 'utf-8')] };
  if (settings.cert) {
    ssl.cert = fs.readFileSync(settings.cert, 'utf-8');
    ssl.key = fs.readFileSync(settings.key, 'utf-8');
  }
  const kafka = new Kafka({
    clientId: 'strand-kafkajs-secure',
    brokers: [bootstrap],
    ssl,
    sasl: settings.sasl,
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 2 },
  });
  const producer = kafka.producer();
  await producer.connect();
  try {
    const messages = [];
    for (let i = 0; i < count; i++) messages.push({ partition: 0, value: `v${i}` });
    await producer.send({ topic, acks: -1, messages });
  } finally {
    await producer.disconnect();
  }
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  let consumed = 0;
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`consumed ${consumed} of ${count}`)), 60000);
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          consumed += 1;
          if (consumed === count) {
            await consumer.commitOffsets([
              { topic, partition, offset: String(Number(message.offset) + 1) },
            ]);
            clearTimeout(timer);
            resolve();
          }
        },
      }).catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  const admin = kafka.admin();
  await admin.connect();
  try {
    const [t] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const p0 = t.partitions.find((p) => p.partition === 0);
    process.stdout.write(`${JSON.stringify({ consumed, committed: p0.offset })}\n`);
  } finally {
    await admin.disconnect();
  }
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
