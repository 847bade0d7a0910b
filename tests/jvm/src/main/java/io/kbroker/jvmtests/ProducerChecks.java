package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;
import static io.kbroker.jvmtests.Report.require;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The producer: acks 0, 1 and all (all: idempotent, the client's default) times every
 * compression codec, one producer per pair writing RECORDS records to its own partition
 * (TOPIC has ACKS.length * CODECS.length partitions); keys, null keys, null values, headers
 * (one with a null value) and explicit timestamps. Everything is read back with the Java
 * consumer and compared field by field. Then a record larger than the broker's
 * message.max.bytes is refused.
 */
final class ProducerChecks {
    static final String[] ACKS = {"0", "1", "all"};
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int RECORDS = 300;

    private ProducerChecks() {}

    static void run(String bootstrap, String topic) throws Exception {
        Map<Integer, List<ProducerRecord<byte[], byte[]>>> sent = new HashMap<>();
        int partition = 0;
        for (String acks : ACKS) {
            for (String codec : CODECS) {
                sent.put(partition, produce(bootstrap, topic, partition, acks, codec));
                partition++;
            }
        }
        readBack(bootstrap, topic, sent);
        oversize(bootstrap, topic);
    }

    static ProducerRecord<byte[], byte[]> record(String topic, int partition, int i) {
        byte[] key = i % 10 == 9 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
        byte[] value = null;
        if (i % 25 != 24) {
            String text = ("value-" + partition + "-" + i + " ").repeat(1 + i % 20);
            value = text.getBytes(StandardCharsets.UTF_8);
        }
        List<Header> headers = List.of(
                new RecordHeader("index", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
                new RecordHeader("empty", null));
        return new ProducerRecord<>(topic, partition, ClientChecks.BASE_TIMESTAMP + i, key, value, headers);
    }

    static List<ProducerRecord<byte[], byte[]>> produce(String bootstrap, String topic, int partition,
                                                        String acks, String codec) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", acks);
        props.put("compression.type", codec);
        props.put("linger.ms", "20");
        props.put("batch.size", "8192");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        List<Future<RecordMetadata>> acked = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < RECORDS; i++) {
                ProducerRecord<byte[], byte[]> r = record(topic, partition, i);
                records.add(r);
                acked.add(producer.send(r));
            }
            producer.flush();
            List<Long> offsets = new ArrayList<>();
            for (Future<RecordMetadata> f : acked) {
                RecordMetadata md = f.get();
                require(md.partition() == partition, "record acknowledged on partition " + md.partition());
                offsets.add(md.hasOffset() ? md.offset() : -1L);
            }
            emit("produced", "partition", partition, "acks", acks, "codec", codec, "count", records.size(),
                 "first_offset", offsets.get(0), "last_offset", offsets.get(offsets.size() - 1),
                 "in_order", isSequence(offsets));
        }
        return records;
    }

    static boolean isSequence(List<Long> offsets) {
        for (int i = 0; i < offsets.size(); i++) {
            if (offsets.get(i) != i) return false;
        }
        return true;
    }

    static void readBack(String bootstrap, String topic, Map<Integer, List<ProducerRecord<byte[], byte[]>>> sent) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<TopicPartition> tps = new ArrayList<>();
        for (int p : sent.keySet()) tps.add(new TopicPartition(topic, p));
        Map<Integer, Integer> matched = new HashMap<>();
        int mismatches = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                require(System.nanoTime() < deadline, "read everything back within 60 s");
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    ProducerRecord<byte[], byte[]> want = sent.get(r.partition()).get((int) r.offset());
                    if (same(want, r)) {
                        matched.merge(r.partition(), 1, Integer::sum);
                    } else {
                        mismatches++;
                        System.err.println("mismatch at " + r.partition() + "/" + r.offset() + ": " + r);
                    }
                }
            }
        }
        emit("read_back", "matched", matched, "mismatches", mismatches);
    }

    static boolean same(ProducerRecord<byte[], byte[]> want, ConsumerRecord<byte[], byte[]> got) {
        if (!Arrays.equals(want.key(), got.key()) || !Arrays.equals(want.value(), got.value())) return false;
        if (got.timestamp() != want.timestamp() || got.timestampType() != TimestampType.CREATE_TIME) return false;
        Header[] a = want.headers().toArray();
        Header[] b = got.headers().toArray();
        if (a.length != b.length) return false;
        for (int i = 0; i < a.length; i++) {
            if (!a[i].key().equals(b[i].key()) || !Arrays.equals(a[i].value(), b[i].value())) return false;
        }
        return true;
    }

    /** A 2 MiB record that the client lets through (max.request.size) and the broker refuses. */
    static void oversize(String bootstrap, String topic) throws InterruptedException {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("max.request.size", Integer.toString(4 << 20));
        props.put("retries", "0");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        String error = "none";
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(topic, 0, null, new byte[2 << 20])).get();
        } catch (ExecutionException e) {
            error = e.getCause().getClass().getSimpleName();
        }
        emit("oversize", "error", error);
    }
}
