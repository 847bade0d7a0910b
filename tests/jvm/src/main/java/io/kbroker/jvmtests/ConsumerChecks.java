package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;
import static io.kbroker.jvmtests.Report.require;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The consumer without a group subscription: manual assignment, positions, seek,
 * offsetsForTimes, offsets committed by a "simple" group (with metadata), the reset policies
 * at an offset below the log start, a long poll answered by a record produced meanwhile,
 * read_committed, pause and resume. TOPIC has PARTITIONS partitions, empty at the start.
 */
final class ConsumerChecks {
    static final int PARTITIONS = 3;
    static final int PER_PARTITION = 30;

    private ConsumerChecks() {}

    static long timestamp(int partition, int i) {
        return ClientChecks.BASE_TIMESTAMP + partition * 1000L + i * 10L;
    }

    static void run(String bootstrap, String topic) throws Exception {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) tps.add(new TopicPartition(topic, p));
        try (KafkaProducer<String, String> producer = producer(bootstrap)) {
            for (int p = 0; p < PARTITIONS; p++) {
                for (int i = 0; i < PER_PARTITION; i++) {
                    producer.send(new ProducerRecord<>(topic, p, timestamp(p, i), "k" + i, p + "-" + i));
                }
            }
            producer.flush();
            positionsAndSeek(bootstrap, tps);
            offsetsForTimes(bootstrap, tps);
            commits(bootstrap, topic, tps);
            outOfRange(bootstrap, tps);
            longPoll(bootstrap, tps.get(0), producer);
            pauseResume(bootstrap, tps);
        }
    }

    static KafkaProducer<String, String> producer(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("linger.ms", "5");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(props);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String... extra) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        for (int i = 0; i < extra.length; i += 2) props.put(extra[i], extra[i + 1]);
        return new KafkaConsumer<>(props);
    }

    /** Polls until a record arrives (or 30 s pass: null). */
    static ConsumerRecord<String, String> first(KafkaConsumer<String, String> consumer) {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (System.nanoTime() < deadline) {
            ConsumerRecords<String, String> rs = consumer.poll(Duration.ofMillis(200));
            if (!rs.isEmpty()) return rs.iterator().next();
        }
        return null;
    }

    static void positionsAndSeek(String bootstrap, List<TopicPartition> tps) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "isolation.level", "read_committed")) {
            c.assign(tps);
            c.seekToBeginning(tps);
            List<Long> starts = new ArrayList<>();
            for (TopicPartition tp : tps) starts.add(c.position(tp));
            List<Long> beginnings = new ArrayList<>(sorted(c.beginningOffsets(tps), tps));
            List<Long> ends = new ArrayList<>(sorted(c.endOffsets(tps), tps));
            // read_committed: with no transactions the last stable offset is the high watermark
            int read = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (read < PARTITIONS * PER_PARTITION && System.nanoTime() < deadline) {
                read += c.poll(Duration.ofMillis(200)).count();
            }
            c.assign(List.of(tps.get(0)));
            c.seek(tps.get(0), 17);
            ConsumerRecord<String, String> r = first(c);
            c.seekToEnd(List.of(tps.get(0)));
            emit("positions", "start", starts, "beginning", beginnings, "end", ends, "read_committed", read,
                 "after_seek", r == null ? null : List.of(r.offset(), r.key(), r.value(), r.timestamp()),
                 "after_seek_to_end", c.position(tps.get(0)));
        }
    }

    static List<Long> sorted(Map<TopicPartition, Long> m, List<TopicPartition> tps) {
        List<Long> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(m.get(tp));
        return out;
    }

    static void offsetsForTimes(String bootstrap, List<TopicPartition> tps) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap)) {
            Map<TopicPartition, Long> query = new HashMap<>();
            query.put(tps.get(0), timestamp(0, 0) - 1);            // before everything: the first record
            query.put(tps.get(1), timestamp(1, 5) + 5);            // between records 5 and 6: record 6
            query.put(tps.get(2), timestamp(2, PER_PARTITION));    // after everything: none
            Map<TopicPartition, OffsetAndTimestamp> found = c.offsetsForTimes(query);
            List<Object> out = new ArrayList<>();
            for (TopicPartition tp : tps) {
                OffsetAndTimestamp o = found.get(tp);
                out.add(o == null ? null : List.of(o.offset(), o.timestamp()));
            }
            emit("offsets_for_times", "found", out);
        }
    }

    static void commits(String bootstrap, String topic, List<TopicPartition> tps) {
        String group = topic + "-simple";
        Map<TopicPartition, OffsetAndMetadata> offsets = Map.of(
                tps.get(0), new OffsetAndMetadata(12, "twelve"),
                tps.get(1), new OffsetAndMetadata(30, ""));
        Map<TopicPartition, OffsetAndMetadata> committed;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "group.id", group)) {
            c.assign(tps);
            c.commitSync(offsets);
            committed = c.committed(Set.copyOf(tps));
        }
        List<Object> positions = new ArrayList<>();
        ConsumerRecord<String, String> firstAfter;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "group.id", group, "auto.offset.reset", "latest")) {
            c.assign(tps);
            for (TopicPartition tp : tps) positions.add(c.position(tp));
            c.assign(List.of(tps.get(0)));
            firstAfter = first(c);
        }
        List<Object> got = new ArrayList<>();
        for (TopicPartition tp : tps) {
            OffsetAndMetadata o = committed.get(tp);
            got.add(o == null ? null : List.of(o.offset(), o.metadata()));
        }
        emit("commits", "committed", got, "positions", positions,
             "first_after_commit", firstAfter == null ? null : firstAfter.offset());
    }

    static void outOfRange(String bootstrap, List<TopicPartition> tps) throws Exception {
        TopicPartition tp = tps.get(2);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(10))).all().get();
        }
        String none;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "auto.offset.reset", "none")) {
            c.assign(List.of(tp));
            c.seek(tp, 3);
            try {
                first(c);
                none = "none";
            } catch (OffsetOutOfRangeException e) {
                none = e.getClass().getSimpleName() + " " + e.offsetOutOfRangePartitions();
            }
        }
        ConsumerRecord<String, String> earliest;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "auto.offset.reset", "earliest")) {
            c.assign(List.of(tp));
            c.seek(tp, 3);
            earliest = first(c);
        }
        emit("out_of_range", "reset_none", none, "reset_earliest", earliest == null ? null : earliest.offset());
    }

    /** A long poll (fetch.max.wait.ms 10 s) returns the record produced while it waits. The
     *  consumer closes without waiting for the next long poll it has sent by then. */
    static void longPoll(String bootstrap, TopicPartition tp, KafkaProducer<String, String> producer)
            throws Exception {
        KafkaConsumer<String, String> c = consumer(bootstrap, "fetch.max.wait.ms", "10000");
        try {
            c.assign(List.of(tp));
            c.seekToEnd(List.of(tp));
            long end = c.position(tp);
            require(c.poll(Duration.ofMillis(300)).isEmpty(), "nothing to read at the end");
            Thread sender = new Thread(() -> {
                try {
                    Thread.sleep(300);
                    producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), "late", "late-value")).get();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            sender.start();
            ConsumerRecord<String, String> r = first(c);
            sender.join(30_000);
            emit("long_poll", "end", end, "got", r == null ? null : List.of(r.offset(), r.value()));
        } finally {
            c.close(Duration.ZERO);
        }
    }

    static void pauseResume(String bootstrap, List<TopicPartition> tps) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap)) {
            c.assign(tps.subList(0, 2));
            c.seekToBeginning(tps.subList(0, 2));
            c.pause(List.of(tps.get(0)));
            Map<Integer, Integer> whilePaused = new HashMap<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (whilePaused.getOrDefault(1, 0) < PER_PARTITION && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    whilePaused.merge(r.partition(), 1, Integer::sum);
                }
            }
            c.resume(List.of(tps.get(0)));
            ConsumerRecord<String, String> r = first(c);
            emit("pause_resume", "while_paused", whilePaused, "after_resume",
                 r == null ? null : List.of(r.partition(), r.offset()));
        }
    }
}
