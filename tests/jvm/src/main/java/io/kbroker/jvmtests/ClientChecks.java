package io.kbroker.jvmtests;

/**
 * Apache Kafka's Java client against a broker, one area a run (one JVM start covers many
 * checks):
 *
 *   java -cp tests/jvm/target/kafka-libs/* io.kbroker.jvmtests.ClientChecks AREA BOOTSTRAP TOPIC
 *
 * AREA is producer, consumer, groups or admin; TOPIC names the topic(s) the area uses (the
 * test creates them where the area says so). Output: Report's JSON lines, the first one
 * {"check": "start", "base_timestamp": T}: records carry timestamps from T, a whole minute
 * ten minutes before the start (recent enough for any retention a test broker has).
 */
public final class ClientChecks {
    static final long BASE_TIMESTAMP = System.currentTimeMillis() / 60_000 * 60_000 - 600_000;

    private ClientChecks() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: ClientChecks producer|consumer|groups|admin|kip848|kip848-classic BOOTSTRAP TOPIC");
            System.exit(2);
        }
        String bootstrap = args[1];
        String topic = args[2];
        Report.emit("start", "base_timestamp", BASE_TIMESTAMP);
        switch (args[0]) {
            case "producer" -> ProducerChecks.run(bootstrap, topic);
            case "consumer" -> ConsumerChecks.run(bootstrap, topic);
            case "groups" -> GroupChecks.run(bootstrap, topic);
            case "admin" -> AdminChecks.run(bootstrap, topic);
            case "kip848" -> Kip848Checks.run(bootstrap, topic, false);
            case "kip848-classic" -> Kip848Checks.run(bootstrap, topic, true);
            default -> {
                System.err.println("unknown area " + args[0]);
                System.exit(2);
            }
        }
    }
}
