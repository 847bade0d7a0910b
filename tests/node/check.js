// KafkaJS against a broker:  node check.js BOOTSTRAP TOPIC GROUP_TOPIC
//
// TOPIC (2 partitions): a producer writes RECORDS keyed records with headers, uncompressed
// to partition 0 and gzip-compressed (KafkaJS's built-in codec) to partition 1; a consumer
// group of one member reads them back and compares. GROUP_TOPIC (4 partitions, GROUP_RECORDS
// records already in it) is read by a group of two members, which commit. Each step prints
// one JSON line; a failure exits non-zero with the reason on stderr.
'use strict';
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const RECORDS = 200;
const GROUP_RECORDS = 40;
const DEADLINE_MS = 60000;
const BASE_TS = 1795000000000;

const [bootstrap, topic, groupTopic] = process.argv.slice(2);
// TLS and SASL from the environment (tests/interop/test_security.py): KBROKER_SECURITY_PROTOCOL
// SSL or SASL_SSL trusts the CA of KBROKER_CA_FILE (with KBROKER_CERT_FILE and KBROKER_KEY_FILE:
// a client certificate); KBROKER_SASL_MECHANISM with
// KBROKER_SASL_USER and KBROKER_SASL_PASSWORD authenticates.
function security() {
  const env = process.env;
  const out = {};
  if (env.KBROKER_SECURITY_PROTOCOL === 'SSL' || env.KBROKER_SECURITY_PROTOCOL === 'SASL_SSL') {
    const fs = require('fs');
    out.ssl = { ca: [fs.readFileSync(env.KBROKER_CA_FILE, 'utf-8')], servername: 'localhost' };
    if (env.KBROKER_CERT_FILE) {          // a client certificate (the broker's ssl.client.auth)
      out.ssl.cert = fs.readFileSync(env.KBROKER_CERT_FILE, 'utf-8');
      out.ssl.key = fs.readFileSync(env.KBROKER_KEY_FILE, 'utf-8');
    }
  }
  if (env.KBROKER_SASL_MECHANISM) {
    out.sasl = { mechanism: env.KBROKER_SASL_MECHANISM.toLowerCase(), username: env.KBROKER_SASL_USER,
                 password: env.KBROKER_SASL_PASSWORD };
  }
  return out;
}
const kafka = new Kafka({ clientId: 'kbroker-kafkajs', brokers: [bootstrap], logLevel: logLevel.ERROR,
                          ...security() });

function expected(partition, i) {
  return { key: `key-${partition}-${i}`, value: `value-${partition}-${i} payload payload`,
           header: `${i}`, timestamp: `${BASE_TS + i}` };
}

function emit(facts) { console.log(JSON.stringify(facts)); }

// Runs consumers until done() holds; fails past the deadline.
async function until(done, what) {
  const end = Date.now() + DEADLINE_MS;
  while (!done()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function produceAndReadBack() {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (const [partition, compression] of [[0, CompressionTypes.None], [1, CompressionTypes.GZIP]]) {
    const messages = [];
    for (let i = 0; i < RECORDS; i++) {
      const e = expected(partition, i);
      messages.push({ key: e.key, value: e.value, partition, timestamp: e.timestamp, headers: { h: e.header } });
    }
    const result = await producer.send({ topic, compression, acks: -1, messages });
    emit({ check: 'produced', partition, compression: compression === 0 ? 'none' : 'gzip',
           base_offset: Number(result[0].baseOffset) });
  }
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: `${topic}-reader`, maxWaitTimeInMs: 200 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let matched = 0;
  let mismatches = 0;
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      const e = expected(partition, Number(message.offset));
      const ok = message.key.toString() === e.key && message.value.toString() === e.value
        && message.timestamp === e.timestamp && message.headers.h.toString() === e.header;
      if (ok) matched++; else mismatches++;
    },
  });
  await until(() => matched + mismatches >= 2 * RECORDS, 'reading back');
  await consumer.disconnect();
  emit({ check: 'read_back', matched, mismatches });
}

async function group() {
  const groupId = `${groupTopic}-kafkajs`;
  const seen = new Map();
  const assigned = [0, 0];
  const members = [];
  for (let m = 0; m < 2; m++) {
    const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200, heartbeatInterval: 500 });
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      assigned[m] = (e.payload.memberAssignment[groupTopic] || []).length;
    });
    await consumer.connect();
    await consumer.subscribe({ topic: groupTopic, fromBeginning: true });
    await consumer.run({
      autoCommitInterval: 100,
      eachMessage: async ({ message }) => {
        const v = message.value.toString();
        seen.set(v, (seen.get(v) || 0) + 1);
      },
    });
    members.push(consumer);
  }
  await until(() => seen.size === GROUP_RECORDS && assigned[0] > 0 && assigned[1] > 0
    && assigned[0] + assigned[1] === 4, 'the group reading, its 4 partitions split between the two');
  const split = [...assigned];                        // before leaving: the last member takes all
  for (const c of members) await c.disconnect();     // commits what was read
  let duplicates = 0;
  for (const n of seen.values()) duplicates += n - 1;
  emit({ check: 'group', group: groupId, read: seen.size, duplicates, assigned: split });
}

(async () => {
  await produceAndReadBack();
  await group();
})().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
