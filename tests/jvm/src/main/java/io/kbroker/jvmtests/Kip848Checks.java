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
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * KIP-848 consumer groups (group.protocol=consumer; or, to compare, the classic protocol
 * with the eager range assignor): three members join one by one and
 * leave one by one on TOPIC (PARTITIONS partitions, empty at the start). What each member
 * owns is what its rebalance listener was told; after every poll of every member no
 * partition may be owned by two. Every record is read; the Admin client then describes
 * the group (ConsumerGroupDescribe). One thread polls the members in turn.
 */
final class Kip848Checks {
    static final int PARTITIONS = 12;
    static final int RECORDS = 120;

    private Kip848Checks() {}

    static final class Member implements ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> consumer;
        final Set<Integer> owned = new TreeSet<>();
        final Set<String> consumed = new HashSet<>();
        int revocations;

        Member(String bootstrap, String group, String topic, String name, boolean classic) {
            this.name = name;
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            if (classic) {
                // the same scenario on the classic protocol with an eager assignor, to compare
                props.put("group.protocol", "classic");
                props.put("partition.assignment.strategy", RangeAssignor.class.getName());
                props.put("session.timeout.ms", "10000");
                props.put("heartbeat.interval.ms", "500");
            } else {
                props.put("group.protocol", "consumer");
            }
            props.put("client.id", name);
            props.put("enable.auto.commit", "false");
            props.put("auto.offset.reset", "earliest");
            props.put("max.poll.records", "10");
            props.put("key.deserializer", StringDeserializer.class.getName());
            props.put("value.deserializer", StringDeserializer.class.getName());
            consumer = new KafkaConsumer<>(props);
            consumer.subscribe(List.of(topic), this);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) owned.remove(tp.partition());
            revocations += partitions.size();
            if (!partitions.isEmpty()) consumer.commitSync();
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) owned.remove(tp.partition());
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) owned.add(tp.partition());
        }

        void poll() {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(50))) consumed.add(r.value());
        }
    }

    static void pollAll(List<Member> members, List<Member> everyone) {
        for (Member m : everyone) m.poll();
        Set<Integer> seen = new HashSet<>();
        for (Member m : everyone) {
            for (int p : m.owned) require(seen.add(p), "partition " + p + " owned by two members at once");
        }
    }

    static boolean spread(List<Member> members) {
        Set<Integer> all = new TreeSet<>();
        int total = 0;
        for (Member m : members) {
            if (m.owned.isEmpty()) return false;
            all.addAll(m.owned);
            total += m.owned.size();
        }
        return all.size() == PARTITIONS && total == PARTITIONS;
    }

    static void run(String bootstrap, String topic, boolean classic) throws Exception {
        try (KafkaProducer<String, String> producer = ConsumerChecks.producer(bootstrap)) {
            for (int i = 0; i < RECORDS; i++) producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, "r" + i));
            producer.flush();
        }
        String group = topic + (classic ? "-classic" : "-kip848");
        List<Member> members = new ArrayList<>();
        List<Member> everyone = new ArrayList<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
        for (int i = 0; i < 3; i++) {
            Member m = new Member(bootstrap, group, topic, "m" + i, classic);
            members.add(m);
            everyone.add(m);
            while (!spread(members)) {
                require(System.nanoTime() < deadline, members.size() + " members assigned within 90 s");
                pollAll(members, everyone);
            }
            List<Integer> counts = new ArrayList<>();
            for (Member x : members) counts.add(x.owned.size());
            emit("kip848_join", "members", members.size(), "owned", counts);
        }
        Set<String> all = new HashSet<>();
        while (all.size() < RECORDS) {
            require(System.nanoTime() < deadline, "every record read within 90 s");
            pollAll(members, everyone);
            for (Member m : everyone) all.addAll(m.consumed);
        }
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            emit("kip848_describe", "type", d.type().toString(), "state", d.groupState().toString(),
                 "members", d.members().size(), "assignor", d.partitionAssignor(),
                 "epoch", d.groupEpoch().orElse(-1));
        }
        int revocations = 0;
        while (members.size() > 1) {
            Member gone = members.remove(0);
            revocations += gone.revocations;
            gone.consumer.close();
            everyone.remove(gone);
            while (!spread(members)) {
                require(System.nanoTime() < deadline, members.size() + " members take the partitions back within 90 s");
                pollAll(members, everyone);
            }
        }
        for (Member m : members) revocations += m.revocations;
        emit("kip848_done", "read", all.size(), "revocations", revocations, "last", new ArrayList<>(members.get(0).owned));
        members.get(0).consumer.close();
    }
}
