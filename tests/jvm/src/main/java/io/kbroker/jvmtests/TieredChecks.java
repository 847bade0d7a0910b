package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;

/**
 * Kafka's own classes read kbroker's remote log metadata (broker/tier/metadata.py):
 *
 *   java -cp ... io.kbroker.jvmtests.TieredChecks serde < HEX_LINES
 *   java -cp ... io.kbroker.jvmtests.TieredChecks partition COUNT < "TOPIC_ID PARTITION" lines
 *
 * serde: each line is one __remote_log_metadata value; Kafka's RemoteLogMetadataSerde
 * decodes it and encodes it again: {"check":"serde","text":toString(),"again":hex}.
 * partition: Kafka's RemoteLogMetadataTopicPartitioner's partition for each line.
 */
final class TieredChecks {
    private TieredChecks() {}

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        HexFormat hex = HexFormat.of();
        if (args[0].equals("serde")) {
            RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.isBlank()) {
                    continue;
                }
                RemoteLogMetadata md = serde.deserialize(hex.parseHex(line.trim()));
                emit("serde", "text", md.toString(), "again", hex.formatHex(serde.serialize(md)));
            }
        } else {
            RemoteLogMetadataTopicPartitioner partitioner =
                    new RemoteLogMetadataTopicPartitioner(Integer.parseInt(args[1]));
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.isBlank()) {
                    continue;
                }
                String[] parts = line.trim().split(" ");
                TopicIdPartition tp = new TopicIdPartition(
                        Uuid.fromString(parts[0]), Integer.parseInt(parts[1]), "t");
                emit("partition", "partition", partitioner.metadataPartition(tp));
            }
        }
    }
}
