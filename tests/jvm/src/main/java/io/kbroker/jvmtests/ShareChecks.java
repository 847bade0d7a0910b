package io.kbroker.jvmtests;

import static io.kbroker.jvmtests.Report.emit;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;

/**
 * KIP-932 share groups with the Java Admin client.
 *
 * <pre>
 * ShareChecks describe BOOTSTRAP GROUP
 * </pre>
 *
 * listGroups (type share) and describeShareGroups of GROUP, one line each: the group's
 * state, coordinator, epochs and its members with their client ids, hosts, epochs and
 * assignments.
 */
public final class ShareChecks {
    private ShareChecks() {}

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "describe" -> describe(args[1], args[2]);
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static void describe(String bootstrap, String group) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            List<String> listed = new ArrayList<>();
            for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()) {
                listed.add(g.groupId() + ":" + g.type().map(GroupType::toString).orElse("?") + ":"
                        + g.groupState().map(Object::toString).orElse("?"));
            }
            emit("share-list", "groups", listed);
            ShareGroupDescription d = admin.describeShareGroups(List.of(group)).describedGroups().get(group).get();
            Map<String, Object> members = new TreeMap<>();
            for (ShareMemberDescription m : d.members()) {
                List<String> parts = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    parts.add(tp.topic() + ":" + tp.partition());
                }
                parts.sort(null);
                members.put(m.consumerId(), Map.of("client", m.clientId(), "host", m.host(), "epoch", m.memberEpoch(), "partitions", parts));
            }
            emit("share-describe", "state", d.groupState().toString(),
                    "group_epoch", d.groupEpoch(), "assignment_epoch", d.targetAssignmentEpoch(),
                    "coordinator", d.coordinator().id(), "members", members);
        }
    }
}
