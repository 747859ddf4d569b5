// The Apache Kafka Java client (kafka-clients), unmodified, driving a broker through one check.
//
//   java -cp <classes>:<kafka jars>/* CompatClientCheck BOOTSTRAP CHECK TOPIC
//
// CHECK is one of:
//   cluster          describe the cluster: its nodes, controller and id
//   admin            create (with configs), list, describe topics, configs and the cluster;
//                    alter configs incrementally; add partitions; refuse a duplicate; delete
// The topic of "produce-consume" and "group" exists beforehand with two partitions (the Python test
// creates it), so that those checks depend on the data path only, not on the admin APIs.
//
//   produce-consume  a producer with the Java defaults (idempotence on, acks=all) sends keyed
//                    records with headers, uncompressed and with each codec; a consumer assigns
//                    the partitions, seeks, and reads every record back exactly once, in order;
//                    offsets by timestamp, beginning and end offsets
//   group            a consumer in a group subscribes, reads everything, commits; a second member
//                    of the same group resumes from the committed offsets
//   static-group     a static member (group.instance.id) alone in its group owns both partitions;
//                    when a second static member joins, each ends with one (KIP-345, issue 24)
//
// Every verified fact prints "OK <what>"; the first failure throws, so the exit code is non-zero
// and the last line says what broke. Compiled by tests/compat/test_java_client.py with javac.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class CompatClientCheck {
    private static final Duration WAIT = Duration.ofSeconds(10);
    private static final long BASE_TS = 1_700_000_000_000L;

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            throw new IllegalArgumentException("usage: CompatClientCheck BOOTSTRAP CHECK TOPIC");
        }
        String bootstrap = args[0];
        String topic = args[2];
        switch (args[1]) {
            case "cluster" -> cluster(bootstrap);
            case "admin" -> admin(bootstrap, topic);
            case "produce-consume" -> produceConsume(bootstrap, topic);
            case "group" -> group(bootstrap, topic);
            case "static-group" -> staticGroup(bootstrap, topic);
            default -> throw new IllegalArgumentException("unknown check " + args[1]);
        }
        System.out.println("DONE " + args[1]);
    }

    private static void ok(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError("FAILED " + what);
        }
        System.out.println("OK " + what);
    }

    private static Properties common(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("request.timeout.ms", "10000");
        props.put("default.api.timeout.ms", "10000");
        props.put("reconnect.backoff.max.ms", "500");
        return props;
    }

    private static Admin admin(String bootstrap) {
        return Admin.create(common(bootstrap));
    }

    // ---------------------------------------------------------------------------------------------
    // admin

    private static void cluster(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            DescribeClusterResult cluster = admin.describeCluster();
            ok(cluster.nodes().get().size() == 1, "describeCluster: one node");
            ok(cluster.controller().get() != null, "describeCluster: a controller is named");
            ok(cluster.clusterId().get() != null, "describeCluster: a cluster id");
        }
    }

    private static void admin(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            NewTopic spec = new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            admin.createTopics(List.of(spec)).all().get();
            ok(true, "createTopics " + topic + " with 3 partitions and two configs");
            waitForPartitions(admin, topic, 3);

            ok(admin.listTopics().names().get().contains(topic), "listTopics contains the topic");
            TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            ok(described.partitions().size() == 3, "describeTopics: 3 partitions");
            for (TopicPartitionInfo partition : described.partitions()) {
                ok(partition.leader() != null && partition.isr().size() == 1,
                        "describeTopics: partition " + partition.partition() + " has a leader and an ISR of 1");
            }
            ok(described.topicId() != null, "describeTopics: a topic id");

            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            ok("3600000".equals(config.get("retention.ms").value()), "describeConfigs: retention.ms = 3600000");
            ok(config.get("retention.ms").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "describeConfigs: retention.ms comes from the topic");
            ok(config.get("segment.bytes") != null, "describeConfigs: segment.bytes is listed");
            ok(config.get("segment.bytes").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "describeConfigs: segment.bytes is not a topic override");

            Collection<AlterConfigOp> ops = List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE));
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            Config altered = waitForConfig(admin, resource, "retention.ms", "7200000");
            ok(altered.get("cleanup.policy").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "incrementalAlterConfigs: cleanup.policy override deleted");

            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
            waitForPartitions(admin, topic, 5);
            ok(true, "createPartitions: 3 -> 5");

            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
                ok(false, "createTopics of an existing topic fails");
            } catch (ExecutionException e) {
                ok(e.getCause() instanceof TopicExistsException,
                        "createTopics of an existing topic: TopicExistsException (" + e.getCause() + ")");
            }

            admin.deleteTopics(List.of(topic)).all().get();
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (admin.listTopics().names().get().contains(topic)) {
                if (System.currentTimeMillis() > deadline) {
                    ok(false, "deleteTopics: topic gone from listTopics");
                }
                Thread.sleep(100);
            }
            ok(true, "deleteTopics: topic gone from listTopics");
        }
    }

    private static void waitForPartitions(Admin admin, String topic, int count) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT.toMillis();
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                if (d.partitions().size() == count && d.partitions().stream().allMatch(p -> p.leader() != null)) {
                    return;
                }
            } catch (ExecutionException e) {
                // not visible yet
            }
            if (System.currentTimeMillis() > deadline) {
                ok(false, topic + " has " + count + " partitions with leaders");
            }
            Thread.sleep(100);
        }
    }

    private static Config waitForConfig(Admin admin, ConfigResource resource, String key, String value) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT.toMillis();
        while (true) {
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            if (value.equals(config.get(key).value())) {
                ok(true, "incrementalAlterConfigs: " + key + " = " + value);
                return config;
            }
            if (System.currentTimeMillis() > deadline) {
                ok(false, "incrementalAlterConfigs: " + key + " = " + value + " (is " + config.get(key).value() + ")");
            }
            Thread.sleep(100);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // produce and consume (assign)

    private static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    private static final int PER_CODEC = 40;

    private static KafkaProducer<String, String> producer(String bootstrap, String codec) {
        Properties props = common(bootstrap);
        // Idempotence and acks=all are the Java client's defaults: left unset on purpose.
        props.put("compression.type", codec);
        props.put("linger.ms", "5");
        props.put("max.block.ms", "10000");
        props.put("delivery.timeout.ms", "15000");
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    private static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties props = common(bootstrap);
        if (group != null) {
            props.put("group.id", group);
            props.put("auto.offset.reset", "earliest");
            props.put("enable.auto.commit", "false");
        }
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private static Map<String, Long> produceAll(String bootstrap, String topic) throws Exception {
        Map<String, Long> expectedOffsets = new HashMap<>();
        int n = 0;
        for (String codec : CODECS) {
            try (KafkaProducer<String, String> producer = producer(bootstrap, codec)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                List<String> values = new ArrayList<>();
                for (int i = 0; i < PER_CODEC; i++, n++) {
                    String value = codec + "-" + i;
                    ProducerRecord<String, String> record = new ProducerRecord<>(
                            topic, null, BASE_TS + n, "key-" + (n % 7), value);
                    record.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                    sent.add(producer.send(record));
                    values.add(value);
                }
                producer.flush();
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata metadata = sent.get(i).get();
                    expectedOffsets.put(values.get(i), metadata.offset());
                }
            }
            ok(true, "produced " + PER_CODEC + " records with compression " + codec);
        }
        return expectedOffsets;
    }

    private static void produceConsume(String bootstrap, String topic) throws Exception {
        Map<String, Long> offsets = produceAll(bootstrap, topic);
        int total = CODECS.length * PER_CODEC;
        ok(offsets.size() == total, "every send acknowledged with an offset");

        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, null)) {
            List<TopicPartition> partitions = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            Map<TopicPartition, Long> begins = consumer.beginningOffsets(partitions);
            ok(ends.values().stream().mapToLong(Long::longValue).sum() == total, "endOffsets add up to " + total);
            ok(begins.values().stream().allMatch(o -> o == 0L), "beginningOffsets are 0");

            Set<String> seen = new HashSet<>();
            Map<Integer, Long> lastOffset = new HashMap<>();
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (seen.size() < total && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    if (!seen.add(record.value())) {
                        ok(false, "record " + record.value() + " read once");
                    }
                    Long expected = offsets.get(record.value());
                    if (expected == null || expected != record.offset()) {
                        ok(false, record.value() + " at the offset the producer was told");
                    }
                    Long previous = lastOffset.put(record.partition(), record.offset());
                    if (previous != null && previous >= record.offset()) {
                        ok(false, "offsets increase within partition " + record.partition());
                    }
                    String codec = new String(record.headers().lastHeader("codec").value(), StandardCharsets.UTF_8);
                    if (!record.value().startsWith(codec + "-") || !record.key().startsWith("key-")) {
                        ok(false, "key, value and header of " + record.value() + " intact");
                    }
                }
            }
            ok(seen.size() == total, "consumer (assign + seekToBeginning) read all " + total + " records");

            TopicPartition p0 = partitions.get(0);
            Map<TopicPartition, OffsetAndTimestamp> byTime = consumer.offsetsForTimes(Map.of(p0, BASE_TS));
            ok(byTime.get(p0) != null && byTime.get(p0).offset() == 0L, "offsetsForTimes(first timestamp) = 0");
            Map<TopicPartition, OffsetAndTimestamp> late = consumer.offsetsForTimes(Map.of(p0, BASE_TS + 1_000_000));
            ok(late.get(p0) == null, "offsetsForTimes(after the last record) = none");
        }
    }

    // ---------------------------------------------------------------------------------------------
    // group consumption

    private static void group(String bootstrap, String topic) throws Exception {
        int total = 30;
        try (KafkaProducer<String, String> producer = producer(bootstrap, "none")) {
            for (int i = 0; i < total; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            }
            producer.flush();
        }
        String groupId = topic + "-group";
        Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, groupId)) {
            consumer.subscribe(List.of(topic));
            Set<String> seen = new HashSet<>();
            long deadline = System.currentTimeMillis() + 2 * WAIT.toMillis();
            while (seen.size() < total && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    seen.add(record.value());
                    positions.put(new TopicPartition(record.topic(), record.partition()),
                            new OffsetAndMetadata(record.offset() + 1));
                }
            }
            ok(seen.size() == total, "group member read all " + total + " records");
            consumer.commitSync(positions);
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(positions.keySet());
            ok(committed.equals(positions), "committed offsets read back");
        }
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, groupId)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            int extra = 0;
            while (consumer.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                extra += consumer.poll(Duration.ofMillis(200)).count();
            }
            extra += consumer.poll(Duration.ofMillis(500)).count();
            ok(!consumer.assignment().isEmpty(), "second member joined and got partitions");
            ok(extra == 0, "second member resumes at the committed offsets (read " + extra + " again)");
        }
    }

    // ---------------------------------------------------------------------------------------------
    // static membership

    private static void staticGroup(String bootstrap, String topic) throws Exception {
        String groupId = topic + "-static";
        try (KafkaConsumer<String, String> first = staticConsumer(bootstrap, groupId, "first");
             KafkaConsumer<String, String> second = staticConsumer(bootstrap, groupId, "second")) {
            first.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 3 * WAIT.toMillis();
            while (first.assignment().size() < 2 && System.currentTimeMillis() < deadline) {
                first.poll(Duration.ofMillis(100));
            }
            ok(first.assignment().size() == 2, "a static member alone owns both partitions");
            second.subscribe(List.of(topic));
            deadline = System.currentTimeMillis() + 3 * WAIT.toMillis();
            while ((first.assignment().size() != 1 || second.assignment().size() != 1)
                    && System.currentTimeMillis() < deadline) {
                first.poll(Duration.ofMillis(100));
                second.poll(Duration.ofMillis(100));
            }
            ok(first.assignment().size() == 1 && second.assignment().size() == 1,
                    "with a second static member each owns one partition (first " + first.assignment()
                    + ", second " + second.assignment() + ")");
        }
    }

    private static KafkaConsumer<String, String> staticConsumer(String bootstrap, String group, String instance) {
        Properties props = common(bootstrap);
        props.put("group.id", group);
        props.put("group.instance.id", instance);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("session.timeout.ms", "10000");
        props.put("heartbeat.interval.ms", "500");
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }
}
