package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Schema validation on produce (docs/schema-registry.md), as the Java producer sees it:
 *
 *   java -cp tests/jvm/target/kafka-libs/* io.kbroker.jvmtests.ValidationChecks BOOTSTRAP TOPIC VALID_ID WRONG_ID
 *
 * TOPIC validates its values; VALID_ID is registered under its subject, WRONG_ID is not.
 * One record at a time (each its own batch): a value framed with WRONG_ID, an unframed
 * value, a value framed with VALID_ID. Then one batch of three records, the middle one
 * unframed. Each record's outcome is one Report line: "sent" with its index, and the
 * exception's class and message, or its offset.
 */
public final class ValidationChecks {
    private ValidationChecks() {}

    static byte[] framed(int id, String payload) {
        byte[] p = payload.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(5 + p.length).put((byte) 0).putInt(id).put(p).array();
    }

    static void outcome(String batch, int index, Future<RecordMetadata> f) throws InterruptedException {
        try {
            RecordMetadata md = f.get();
            emit("sent", "batch", batch, "index", index, "error", "none", "offset", md.offset());
        } catch (ExecutionException e) {
            emit("sent", "batch", batch, "index", index, "error", e.getCause().getClass().getSimpleName(),
                    "message", String.valueOf(e.getCause().getMessage()));
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int valid = Integer.parseInt(args[2]);
        int wrong = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("linger.ms", "500");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        byte[][] values = {framed(wrong, "wrong id"), "not framed".getBytes(StandardCharsets.UTF_8),
            framed(valid, "valid")};
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < values.length; i++) {
                Future<RecordMetadata> f = producer.send(new ProducerRecord<>(topic, 0, null, values[i]));
                producer.flush();
                outcome("single", i, f);
            }
            byte[][] together = {framed(valid, "a"), "not framed".getBytes(StandardCharsets.UTF_8),
                framed(valid, "c")};
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (byte[] v : together) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, null, v)));
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                outcome("together", i, sent.get(i));
            }
        }
    }
}
