package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;
import static io.kbroker.jvmtests.Report.require;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Classic consumer groups with each assignor (range, roundrobin, cooperative-sticky): a
 * member reads alone, a second joins (eager assignors revoke everything first, the
 * cooperative one only what moves), both read every record once between them and commit,
 * the second leaves and the first takes all partitions back; the Admin client then sees
 * the committed offsets and the group's assignor. TOPIC has PARTITIONS partitions, empty at
 * the start. One thread polls both members in turn.
 */
final class GroupChecks {
    static final int PARTITIONS = 6;
    static final int RECORDS = 60;

    private GroupChecks() {}

    static void run(String bootstrap, String topic) throws Exception {
        try (KafkaProducer<String, String> producer = ConsumerChecks.producer(bootstrap)) {
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, "r" + i));
            }
            producer.flush();
        }
        group(bootstrap, topic, "range", RangeAssignor.class.getName());
        group(bootstrap, topic, "roundrobin", RoundRobinAssignor.class.getName());
        group(bootstrap, topic, "cooperative-sticky", CooperativeStickyAssignor.class.getName());
    }

    /** A member and what its rebalance listener saw. */
    static final class Member implements ConsumerRebalanceListener {
        final KafkaConsumer<String, String> consumer;
        final List<List<Integer>> revoked = new ArrayList<>();
        final Set<String> consumed = new HashSet<>();
        int duplicates;
        int rebalanceRefusals;

        Member(String bootstrap, String group, String assignor, String topic) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            props.put("partition.assignment.strategy", assignor);
            props.put("enable.auto.commit", "false");
            props.put("auto.offset.reset", "earliest");
            props.put("session.timeout.ms", "10000");
            props.put("heartbeat.interval.ms", "500");
            props.put("max.poll.records", "5");
            props.put("key.deserializer", StringDeserializer.class.getName());
            props.put("value.deserializer", StringDeserializer.class.getName());
            consumer = new KafkaConsumer<>(props);
            consumer.subscribe(List.of(topic), this);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (!partitions.isEmpty()) revoked.add(indexes(partitions));
            commit();
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}

        void poll() {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                if (!consumed.add(r.value())) duplicates++;
            }
            commit();
        }

        /** Commits what was read; during a rebalance the client refuses (the next poll
         *  completes the rebalance and the next commit goes through), as any application sees. */
        void commit() {
            try {
                consumer.commitSync();
            } catch (RebalanceInProgressException e) {
                rebalanceRefusals++;
            }
        }

        List<Integer> assignment() {
            return indexes(consumer.assignment());
        }
    }

    static List<Integer> indexes(Collection<TopicPartition> tps) {
        TreeSet<Integer> s = new TreeSet<>();
        for (TopicPartition tp : tps) s.add(tp.partition());
        return new ArrayList<>(s);
    }

    static void group(String bootstrap, String topic, String name, String assignor) throws Exception {
        String group = topic + "-" + name;
        Member a = new Member(bootstrap, group, assignor, topic);
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (a.assignment().size() < PARTITIONS || a.consumed.size() < RECORDS / 2) {
            require(System.nanoTime() < deadline, name + ": the first member reads within 60 s");
            a.poll();
        }
        List<Integer> alone = a.assignment();
        int readAlone = a.consumed.size();
        int revokesBefore = a.revoked.size();
        Member b = new Member(bootstrap, group, assignor, topic);
        while (a.assignment().isEmpty() || b.assignment().isEmpty()
                || a.assignment().size() + b.assignment().size() != PARTITIONS) {
            require(System.nanoTime() < deadline, name + ": both members assigned within 60 s");
            a.poll();
            b.poll();
        }
        Set<Integer> overlap = new TreeSet<>(a.assignment());
        overlap.retainAll(b.assignment());
        List<List<Integer>> revokedOnJoin = new ArrayList<>(a.revoked.subList(revokesBefore, a.revoked.size()));
        Set<String> all = new HashSet<>(a.consumed);
        all.addAll(b.consumed);
        while (all.size() < RECORDS) {
            require(System.nanoTime() < deadline, name + ": every record read within 60 s");
            a.poll();
            b.poll();
            all.addAll(a.consumed);
            all.addAll(b.consumed);
        }
        emit("group_join", "assignor", name, "alone", alone, "read_alone", readAlone,
             "a", a.assignment(), "b", b.assignment(), "overlap", new ArrayList<>(overlap),
             "revoked_on_join", revokedOnJoin, "read", all.size(), "duplicates", a.duplicates + b.duplicates);

        b.consumer.close();
        while (a.assignment().size() < PARTITIONS) {
            require(System.nanoTime() < deadline, name + ": the remaining member takes every partition");
            a.poll();
        }
        a.consumer.commitSync();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long committed = offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            emit("group_after_leave", "assignor", name, "a", a.assignment(), "committed", committed,
                 "state", d.groupState().toString(), "members", d.members().size(),
                 "partition_assignor", d.partitionAssignor(), "simple", d.isSimpleConsumerGroup());
        }
        a.consumer.close();
    }
}
