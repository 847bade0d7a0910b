package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;
import static io.kbroker.jvmtests.Report.failure;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The Admin client, every API kbroker implements: topics (create with validateOnly and
 * every validation error, list, describe by name and by id, add partitions, delete),
 * cluster, configs (describe with sources, incremental alter: set, delete, append,
 * subtract), offsets (earliest, latest, max timestamp, by timestamp), delete records, log
 * dirs, consumer groups (list, describe, alter / list / delete offsets, remove members,
 * delete), features; and what kbroker does not implement (ACLs, leader elections,
 * producers) fails cleanly. Topics are named TOPIC-*.
 */
final class AdminChecks {

    private AdminChecks() {}

    static void run(String bootstrap, String prefix) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            String topic = prefix + "-a";
            topics(admin, topic);
            configs(admin, topic);
            offsets(admin, bootstrap, topic);
            groups(admin, bootstrap, topic);
            unsupported(admin, topic);
            admin.deleteTopics(List.of(topic)).all().get();
            emit("deleted", "describe_after", failure(admin.describeTopics(List.of(topic)).allTopicNames()),
                 "listed", admin.listTopics().names().get().contains(topic));
        }
    }

    static void topics(Admin admin, String topic) throws Exception {
        NewTopic nt = new NewTopic(topic, 3, (short) 1).configs(Map.of("retention.ms", "1234567"));
        admin.createTopics(List.of(nt), new CreateTopicsOptions().validateOnly(true)).all().get();
        boolean listedAfterValidate = admin.listTopics().names().get().contains(topic);
        CreateTopicsResult created = admin.createTopics(List.of(nt));
        created.all().get();
        Config createdConfig = created.config(topic).get();
        emit("create", "listed_after_validate_only", listedAfterValidate,
             "partitions", created.numPartitions(topic).get(), "replication", created.replicationFactor(topic).get(),
             "retention_ms", createdConfig.get("retention.ms").value(),
             "topic_id_set", !created.topicId(topic).get().equals(Uuid.ZERO_UUID));

        Map<String, String> errors = new TreeMap<>();
        errors.put("exists", failure(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all()));
        errors.put("zero_partitions", failure(admin.createTopics(List.of(new NewTopic(topic + "-z", 0, (short) 1))).all()));
        errors.put("replication_2", failure(admin.createTopics(List.of(new NewTopic(topic + "-r", 1, (short) 2))).all()));
        errors.put("bad_config", failure(admin.createTopics(List.of(new NewTopic(topic + "-c", 1, (short) 1)
                .configs(Map.of("retention.ms", "soon")))).all()));
        errors.put("bad_name", failure(admin.createTopics(List.of(new NewTopic("bad name!", 1, (short) 1))).all()));
        emit("create_errors", "errors", errors);

        TopicDescription byName = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        Uuid id = byName.topicId();
        TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get().get(id);
        emit("describe", "name", byName.name(), "by_id_name", byId.name(), "internal", byName.isInternal(),
             "partitions", partitions(byName.partitions()));

        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
        String shrink = failure(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
        int count = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        emit("create_partitions", "count", count, "shrink", shrink);

        DescribeClusterResult cluster = admin.describeCluster();
        List<Integer> nodes = new ArrayList<>();
        cluster.nodes().get().forEach(n -> nodes.add(n.id()));
        emit("cluster", "nodes", nodes, "controller", cluster.controller().get().id(),
             "cluster_id_set", cluster.clusterId().get() != null && !cluster.clusterId().get().isEmpty());
    }

    static List<Object> partitions(List<TopicPartitionInfo> infos) {
        List<Object> out = new ArrayList<>();
        for (TopicPartitionInfo p : infos) {
            out.add(List.of(p.partition(), p.leader().id(), p.replicas().size(), p.isr().size()));
        }
        return out;
    }

    static Map<String, Object> describe(Admin admin, ConfigResource r, String... names) throws Exception {
        Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
        Map<String, Object> out = new TreeMap<>();
        for (String n : names) {
            ConfigEntry e = c.get(n);
            out.put(n, e == null ? null : List.of(String.valueOf(e.value()), e.source().toString(), e.isDefault(),
                                                  e.isReadOnly()));
        }
        return out;
    }

    static void configs(Admin admin, String topic) throws Exception {
        ConfigResource t = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        emit("describe_configs", "topic", describe(admin, t, "retention.ms", "segment.bytes", "cleanup.policy"),
             "broker", describe(admin, new ConfigResource(ConfigResource.Type.BROKER, "0"), "num.partitions",
                                "group.initial.rebalance.delay.ms"));
        Collection<AlterConfigOp> ops = List.of(
                new AlterConfigOp(new ConfigEntry("segment.ms", "3600000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND));
        admin.incrementalAlterConfigs(Map.of(t, ops)).all().get();
        Map<String, Object> after = describe(admin, t, "segment.ms", "retention.ms", "cleanup.policy");
        admin.incrementalAlterConfigs(Map.of(t, List.of(new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                AlterConfigOp.OpType.SUBTRACT)))).all().get();
        Map<String, Object> subtracted = describe(admin, t, "cleanup.policy");
        String bad = failure(admin.incrementalAlterConfigs(Map.of(t, List.of(new AlterConfigOp(
                new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
        emit("alter_configs", "after", after, "subtracted", subtracted, "unknown_key", bad);
    }

    static Object listed(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get();
        return List.of(info.offset(), info.timestamp());
    }

    static void offsets(Admin admin, String bootstrap, String topic) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = ConsumerChecks.producer(bootstrap)) {
            for (int i = 0; i < 20; i++) {
                producer.send(new ProducerRecord<>(topic, 0, ClientChecks.BASE_TIMESTAMP + i * 100L, null, "v" + i));
            }
            producer.flush();
        }
        Map<String, Object> found = new TreeMap<>();
        found.put("earliest", listed(admin, tp, OffsetSpec.earliest()));
        found.put("latest", listed(admin, tp, OffsetSpec.latest()));
        found.put("max_timestamp", listed(admin, tp, OffsetSpec.maxTimestamp()));
        found.put("for_timestamp", listed(admin, tp, OffsetSpec.forTimestamp(ClientChecks.BASE_TIMESTAMP + 450)));
        found.put("after_last", listed(admin, tp, OffsetSpec.forTimestamp(ClientChecks.BASE_TIMESTAMP + 10_000)));
        long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(7))).lowWatermarks().get(tp).get()
                .lowWatermark();
        found.put("earliest_after_delete", listed(admin, tp, OffsetSpec.earliest()));
        emit("list_offsets", "found", found, "low_watermark", low);

        Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(0)).allDescriptions().get().get(0);
        List<Object> sizes = new ArrayList<>();
        for (LogDirDescription d : dirs.values()) {
            d.replicaInfos().forEach((p, info) -> {
                if (p.topic().equals(topic)) sizes.add(List.of(p.partition(), info.size() > 0, info.offsetLag()));
            });
        }
        sizes.sort((x, y) -> Integer.compare((Integer) ((List<?>) x).get(0), (Integer) ((List<?>) y).get(0)));
        emit("log_dirs", "dirs", dirs.size(), "partitions", sizes,
             "usable_bytes_set", dirs.values().iterator().next().usableBytes().isPresent());
    }

    static void groups(Admin admin, String bootstrap, String topic) throws Exception {
        String group = topic + "-g";
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(5, "meta"), p1,
                new OffsetAndMetadata(0))).all().get();
        Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        Optional<GroupListing> listing = admin.listGroups().all().get().stream()
                .filter(g -> g.groupId().equals(group)).findFirst();
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        emit("group_offsets", "offsets", List.of(offsets.get(p0).offset(), offsets.get(p0).metadata(),
                                                  offsets.get(p1).offset()),
             "listed", listing.map(g -> List.of(g.protocol(), g.groupState().map(Object::toString).orElse("?"),
                                                g.type().map(Object::toString).orElse("?"))).orElse(null),
             "state", d.groupState().toString(), "members", d.members().size());

        admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get();
        Set<TopicPartition> left = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().keySet();

        // a static member, removed by the Admin client
        String staticGroup = topic + "-static";
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", staticGroup);
        props.put("group.instance.id", "instance-1");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        int membersBefore;
        int membersAfter;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (c.assignment().isEmpty() && System.nanoTime() < deadline) c.poll(Duration.ofMillis(100));
            membersBefore = admin.describeConsumerGroups(List.of(staticGroup)).all().get().get(staticGroup)
                    .members().size();
            admin.removeMembersFromConsumerGroup(staticGroup, new RemoveMembersFromConsumerGroupOptions()).all().get();
            membersAfter = admin.describeConsumerGroups(List.of(staticGroup)).all().get().get(staticGroup)
                    .members().size();
        }
        admin.deleteConsumerGroups(List.of(group)).all().get();
        String deletedState = admin.describeConsumerGroups(List.of(group)).all().get().get(group).groupState().toString();
        emit("group_admin", "offsets_left", left.size(), "static_members_before", membersBefore,
             "static_members_after", membersAfter, "deleted_state", deletedState,
             "delete_again", failure(admin.deleteConsumerGroups(List.of(group)).all()));
    }

    static void unsupported(Admin admin, String topic) {
        TopicPartition p0 = new TopicPartition(topic, 0);
        Map<String, String> errors = new TreeMap<>();
        errors.put("describe_acls", failure(admin.describeAcls(AclBindingFilter.ANY).values()));
        errors.put("elect_leaders", failure(admin.electLeaders(ElectionType.PREFERRED, Set.of(p0)).all()));
        errors.put("describe_producers", failure(admin.describeProducers(List.of(p0)).all()));
        errors.put("describe_features", failure(admin.describeFeatures().featureMetadata()));
        emit("unsupported", "errors", errors);
    }
}
