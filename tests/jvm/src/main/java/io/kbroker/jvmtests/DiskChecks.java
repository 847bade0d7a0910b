package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;

import java.io.File;
import java.io.FileReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.storage.log.FetchIsolation;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.CleanShutdownFileHandler;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.checkpoint.PartitionMetadataFile;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.FetchDataInfo;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.ProducerStateEntry;
import org.apache.kafka.storage.internals.log.ProducerStateManager;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

/**
 * Kafka reads a data directory written by another broker (kbroker), with Kafka's own
 * storage classes:
 *
 *   java -cp ... io.kbroker.jvmtests.DiskChecks DATA_DIR TOPIC
 *
 * The directory's checkpoint files (recovery points, log start offsets, high watermarks),
 * meta.properties and clean-shutdown marker; then for each TOPIC-N partition directory its
 * partition.metadata, leader-epoch-checkpoint and producer snapshots, the whole log opened
 * as Kafka opens it after a clean shutdown (UnifiedLog's loader: segments, index sanity
 * checks, producer state from the snapshots) and read back record by record, and opened again with recovery from
 * offset 0 (every batch re-validated, indexes rebuilt). Work on a copy: opening a log may
 * rewrite its files.
 */
final class DiskChecks {
    private DiskChecks() {}

    public static void main(String[] args) throws Exception {
        File dir = new File(args[0]);
        String topic = args[1];
        LogDirFailureChannel failures = new LogDirFailureChannel(8);
        Map<TopicPartition, Long> recovery = new OffsetCheckpointFile(
                new File(dir, "recovery-point-offset-checkpoint"), failures).read();
        Map<TopicPartition, Long> logStart = new OffsetCheckpointFile(
                new File(dir, "log-start-offset-checkpoint"), failures).read();
        Map<TopicPartition, Long> highWatermarks = new OffsetCheckpointFile(
                new File(dir, "replication-offset-checkpoint"), failures).read();
        CleanShutdownFileHandler clean = new CleanShutdownFileHandler(dir.getPath());
        Properties meta = new Properties();
        try (FileReader r = new FileReader(new File(dir, "meta.properties"), StandardCharsets.UTF_8)) {
            meta.load(r);
        }
        emit("data_dir", "recovery_points", byPartition(recovery, topic), "log_start_offsets",
             byPartition(logStart, topic), "high_watermarks", byPartition(highWatermarks, topic),
             "clean_shutdown", clean.exists(), "meta", new TreeMap<>(meta));

        KafkaScheduler scheduler = new KafkaScheduler(1);
        scheduler.startup();
        try {
            File[] parts = dir.listFiles(f -> f.isDirectory() && f.getName().startsWith(topic + "-"));
            Arrays.sort(parts);
            for (File p : parts) {
                TopicPartition tp = new TopicPartition(topic, Integer.parseInt(p.getName().substring(topic.length() + 1)));
                partition(p, tp, failures, scheduler, logStart.getOrDefault(tp, 0L), recovery.getOrDefault(tp, 0L),
                          clean.exists());
            }
        } finally {
            scheduler.shutdown();
        }
    }

    static Map<String, Long> byPartition(Map<TopicPartition, Long> m, String topic) {
        Map<String, Long> out = new TreeMap<>();
        m.forEach((tp, v) -> {
            if (tp.topic().equals(topic)) out.put(Integer.toString(tp.partition()), v);
        });
        return out;
    }

    static void partition(File dir, TopicPartition tp, LogDirFailureChannel failures, KafkaScheduler scheduler,
                          long logStart, long recoveryPoint, boolean cleanShutdown) throws Exception {
        Uuid topicId = new PartitionMetadataFile(PartitionMetadataFile.newFile(dir), failures).read().topicId();
        List<Object> epochs = new ArrayList<>();
        for (EpochEntry e : new LeaderEpochCheckpointFile(LeaderEpochCheckpointFile.newFile(dir), failures).read()) {
            epochs.add(List.of(e.epoch(), e.startOffset()));
        }
        Map<String, Object> snapshots = new TreeMap<>();
        File[] snaps = dir.listFiles(f -> f.getName().endsWith(".snapshot"));
        for (File s : snaps) {
            List<Object> entries = new ArrayList<>();
            for (ProducerStateEntry e : ProducerStateManager.readSnapshot(s)) {
                entries.add(List.of(e.producerId(), (int) e.producerEpoch(), e.lastDataOffset()));
            }
            snapshots.put(s.getName(), entries);
        }
        emit("partition_files", "partition", tp.partition(), "topic_id", topicId.toString(), "leader_epochs", epochs,
             "snapshots", snapshots);

        UnifiedLog log = open(dir, topicId, scheduler, failures, logStart, recoveryPoint, cleanShutdown);
        try {
            Map<String, Object> producers = new TreeMap<>();
            log.activeProducersWithLastSequence().forEach((id, seq) -> producers.put(id.toString(), seq));
            emit("loaded", "partition", tp.partition(), "log_start", log.logStartOffset(),
                 "log_end", log.logEndOffset(), "segments", log.numberOfSegments(),
                 "latest_epoch", log.latestEpoch().orElse(-1), "producers", producers,
                 "records", records(log));
        } finally {
            log.close();
        }
        UnifiedLog recovered = open(dir, topicId, scheduler, failures, logStart, 0, false);
        try {
            emit("recovered", "partition", tp.partition(), "log_start", recovered.logStartOffset(),
                 "log_end", recovered.logEndOffset(), "segments", recovered.numberOfSegments());
        } finally {
            recovered.close();
        }
    }

    static UnifiedLog open(File dir, Uuid topicId, KafkaScheduler scheduler, LogDirFailureChannel failures,
                           long logStart, long recoveryPoint, boolean cleanShutdown) throws IOException {
        return UnifiedLog.create(dir, new LogConfig(Map.of()), logStart, recoveryPoint, scheduler,
                new BrokerTopicStats(false), Time.SYSTEM, 900_000, new ProducerStateManagerConfig(86_400_000, false),
                600_000, failures, cleanShutdown, Optional.of(topicId));
    }

    /** Every record: [offset, timestamp, key, value, [header key, header value]...] (UTF-8, null kept). */
    static List<Object> records(UnifiedLog log) throws IOException {
        List<Object> out = new ArrayList<>();
        long offset = log.logStartOffset();
        while (offset < log.logEndOffset()) {
            FetchDataInfo data = log.read(offset, 1 << 20, FetchIsolation.LOG_END, true);
            long next = offset;
            for (RecordBatch batch : data.records.batches()) {
                for (Record r : batch) {
                    if (r.offset() < offset) continue;
                    List<Object> headers = new ArrayList<>();
                    for (Header h : r.headers()) headers.add(Arrays.asList(h.key(), text(h.value())));
                    out.add(Arrays.asList(r.offset(), r.timestamp(), text(r.key()), text(r.value()), headers));
                }
                next = batch.nextOffset();
            }
            if (next == offset) break;
            offset = next;
        }
        return out;
    }

    static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static String text(java.nio.ByteBuffer b) {
        if (b == null) return null;
        byte[] bytes = new byte[b.remaining()];
        b.duplicate().get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
