package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Share-group throughput (bench/share_groups.py): CONSUMERS share consumers of group GROUP
 * (implicit acknowledgement: each poll accepts the records of the one before) read TOPIC,
 * preloaded with RECORDS records, in one JVM (a thread each), until RECORDS records were
 * received between them; or, MODE classic, one classic consumer (KafkaConsumer) reads
 * them all, to compare. The share group first gets share.auto.offset.reset=earliest (a
 * group config, as kafka-configs --entity-type groups sets it).
 *
 *   java -cp tests/jvm/target/kafka-libs/* io.kbroker.jvmtests.ShareBench BOOTSTRAP TOPIC GROUP share|classic CONSUMERS RECORDS
 *
 * Output: {"check":"bench", records, seconds (first record to the last), acked}.
 */
public final class ShareBench {
    private ShareBench() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        boolean share = args[3].equals("share");
        int consumers = Integer.parseInt(args[4]);
        long records = Long.parseLong(args[5]);
        AtomicLong received = new AtomicLong();
        AtomicLong first = new AtomicLong();
        AtomicLong last = new AtomicLong();
        long deadline = System.nanoTime() + Duration.ofMinutes(5).toNanos();
        if (share) {
            Properties ap = new Properties();
            ap.put("bootstrap.servers", bootstrap);
            try (Admin admin = Admin.create(ap)) {
                ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
                admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
                        new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                    .all().get();
            }
        }
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            props.put("client.id", "bench-" + i);
            props.put("key.deserializer", ByteArrayDeserializer.class.getName());
            props.put("value.deserializer", ByteArrayDeserializer.class.getName());
            props.put("max.poll.records", "500");
            Thread t = new Thread(() -> {
                if (share) {
                    try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(props)) {
                        c.subscribe(List.of(topic));
                        while (received.get() < records && System.nanoTime() < deadline) {
                            ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
                            count(rs.count(), received, first, last, records);
                        }
                        c.commitSync(); // the last poll's acknowledgements
                    }
                } else {
                    props.put("auto.offset.reset", "earliest");
                    props.put("enable.auto.commit", "false");
                    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                        c.subscribe(List.of(topic));
                        while (received.get() < records && System.nanoTime() < deadline) {
                            ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
                            count(rs.count(), received, first, last, records);
                        }
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        double seconds = (last.get() - first.get()) / 1e9;
        emit("bench", "records", received.get(), "seconds", seconds);
    }

    private static void count(int n, AtomicLong received, AtomicLong first, AtomicLong last, long records) {
        if (n == 0) {
            return;
        }
        long now = System.nanoTime();
        first.compareAndSet(0, now);
        if (received.addAndGet(n) >= records) {
            last.compareAndSet(0, now);
        }
    }
}
