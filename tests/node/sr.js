// @kafkajs/confluent-schema-registry against a registry:  node sr.js REGISTRY_URL BOOTSTRAP TOPIC
//
// Registers an Avro, a Protobuf and a JSON schema, encodes records with each (the
// registry's framing: magic byte, schema id), sends them through the broker with KafkaJS,
// reads them back and decodes them; then a few look-ups and one refusal. Each step prints
// one JSON line; a failure exits non-zero with the reason on stderr.
'use strict';
const { Kafka, logLevel } = require('kafkajs');
const { SchemaRegistry, SchemaType } = require('@kafkajs/confluent-schema-registry');

const [registryUrl, bootstrap, topic] = process.argv.slice(2);
const DEADLINE_MS = 60000;

const AVRO = JSON.stringify({ type: 'record', name: 'Click', namespace: 'node',
  fields: [{ name: 'user', type: 'string' }, { name: 'n', type: 'int' }] });
const PROTO = `syntax = "proto3";
package node;
message Payment {
  string id = 1;
  double amount = 2;
}`;
const JSONSCHEMA = JSON.stringify({ type: 'object', properties: { id: { type: 'integer' }, item: { type: 'string' } },
  required: ['id'] });

function emit(facts) { console.log(JSON.stringify(facts)); }

async function main() {
  const registry = new SchemaRegistry({ host: registryUrl });
  const kinds = [
    [SchemaType.AVRO, AVRO, `${topic}-avro-value`, (i) => ({ user: `u${i}`, n: i })],
    [SchemaType.PROTOBUF, PROTO, `${topic}-proto-value`, (i) => ({ id: `p${i}`, amount: i + 0.5 })],
    [SchemaType.JSON, JSONSCHEMA, `${topic}-json-value`, (i) => ({ id: i, item: 'thing' })],
  ];
  const ids = {};
  const values = [];
  for (const [type, schema, subject, make] of kinds) {
    const { id } = await registry.register({ type, schema }, { subject });
    const again = (await registry.register({ type, schema }, { subject })).id;
    const latest = await registry.getLatestSchemaId(subject);
    const byVersion = await registry.getRegistryId(subject, 1);
    ids[type] = id;
    emit({ step: 'register', type, id, again, latest, by_version: byVersion });
    for (let i = 0; i < 5; i++) {
      values.push({ type, expected: make(i), value: await registry.encode(id, make(i)) });
    }
  }
  const kafka = new Kafka({ clientId: 'kbroker-sr', brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: values.map((v) => ({ value: v.value })) });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `sr-${topic}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${got.length} records`)), DEADLINE_MS);
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(await registry.decode(message.value));
        if (got.length === values.length) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  const same = got.every((g, i) => JSON.stringify(
    values[i].type === SchemaType.PROTOBUF ? { id: g.id, amount: g.amount } : g) === JSON.stringify(values[i].expected));
  emit({ step: 'round_trip', records: got.length, same, framed: values.every((v) => v.value[0] === 0) });
  let missing = null;
  try {
    await registry.getSchema(987654);
  } catch (e) {
    missing = { status: e.status !== undefined ? e.status : (e.response && e.response.status()), message: e.message };
  }
  emit({ step: 'missing', missing });
}

main().catch((e) => { console.error(e && e.stack ? e.stack : String(e)); process.exit(1); });
