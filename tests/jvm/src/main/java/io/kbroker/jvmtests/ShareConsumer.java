package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One KIP-932 share consumer (KafkaShareConsumer, explicit acknowledgement) in share group
 * GROUP on TOPIC, until it is killed:
 *
 *   java -cp tests/jvm/target/kafka-libs/* io.kbroker.jvmtests.ShareConsumer BOOTSTRAP TOPIC GROUP NAME MODE
 *
 * MODE "work": each record is acknowledged ACCEPT — but a record whose value starts with
 * "rel-" is RELEASEd on its first delivery, and one whose value starts with "poison" is
 * RELEASEd on every delivery (the broker's delivery count limit then archives it). MODE
 * "hold": the records of its first poll that returns any are never acknowledged (the test
 * kills it -9 or stops it then). Output, one JSON line each: {"check":"record", member,
 * offset, value, delivery, t (the wall clock's milliseconds)} per record received, {"check":"acked", member, type, offsets} once commitSync
 * reports the acknowledgements of a poll done, {"check":"ack-failed", ...} otherwise.
 */
public final class ShareConsumer {
    private ShareConsumer() {}

    public static void main(String[] args) {
        if (args.length != 5) {
            System.err.println("usage: ShareConsumer BOOTSTRAP TOPIC GROUP NAME work|hold");
            System.exit(2);
        }
        String name = args[3];
        boolean hold = args[4].equals("hold");
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("client.id", name);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("max.poll.records", "5");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]));
            emit("started", "member", name);
            while (true) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                List<Long> accepted = new ArrayList<>();
                List<Long> released = new ArrayList<>();
                for (ConsumerRecord<String, String> r : records) {
                    int delivery = r.deliveryCount().map(Short::intValue).orElse(-1);
                    emit(
                            "record", "member", name, "offset", r.offset(), "value", r.value(), "delivery", delivery,
                            "t", System.currentTimeMillis());
                    if (hold) {
                        continue;
                    }
                    String v = r.value();
                    if (v.startsWith("poison") || (v.startsWith("rel-") && delivery == 1)) {
                        consumer.acknowledge(r, AcknowledgeType.RELEASE);
                        released.add(r.offset());
                    } else {
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.add(r.offset());
                    }
                }
                if (hold) {
                    emit("holding", "member", name);
                    Thread.sleep(Long.MAX_VALUE);
                }
                Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
                boolean ok = result.values().stream().allMatch(Optional::isEmpty);
                if (ok) {
                    emit("acked", "member", name, "type", "ACCEPT", "offsets", accepted);
                    emit("acked", "member", name, "type", "RELEASE", "offsets", released);
                } else {
                    emit("ack-failed", "member", name, "offsets", accepted, "error", result.toString());
                }
                Thread.sleep(50); // leaves the other consumers their turn
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
