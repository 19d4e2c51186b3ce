// Transactions with the Apache Kafka Java client against strand (driven by
// tests/kafka/test_transactions_clients.py). Runs one scenario, which creates its topics,
// and prints one JSON line with what it saw, or prints the problem and exits 1:
// - visibility <topic>: on 2 partitions, a committed transaction (c0..c5, record i in
//   partition i % 2), an aborted one (a0..a5, acknowledged before the abort), then a
//   committed one with "end" in each partition. Prints the records read with
//   read_committed and with read_uncommitted, each read until "end" in every partition:
//   {"read_committed": [...], "read_uncommitted": [...]};
// - atomic <topicA> <topicB>: on 3 partitions each, transactions n = 0..9 writing "<n>"
//   to every partition of both topics, the odd ones aborted, then "end" everywhere.
//   Prints {"read_committed": [...]};
// - offsets <topic> <group>: a transaction producing to the topic with
//   sendOffsetsToTransaction(offset 5, consumer.groupMetadata()) is aborted, another with
//   offset 7 committed. Prints the group's committed offset (null for none) after each:
//   {"after_abort": ..., "after_commit": ...}.
// A record is [topic, partition, offset, value].
//
// Usage: java -cp <kafka-clients and deps>:<classes> TxnCheck <bootstrap> <scenario> <args>...

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnCheck {
    private TxnCheck() {}

    private static void createTopics(String bootstrap, int partitions, String... topics)
            throws Exception {
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        List<NewTopic> newTopics = new ArrayList<>();
        for (String t : topics) {
            newTopics.add(new NewTopic(t, partitions, (short) 1));
        }
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(newTopics).all().get(20, TimeUnit.SECONDS);
        }
    }

    private static KafkaProducer<String, String> txnProducer(String bootstrap, String id) {
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("transactional.id", id);
        pp.put("linger.ms", "5");
        pp.put("delivery.timeout.ms", "30000");
        pp.put("request.timeout.ms", "15000");
        pp.put("max.block.ms", "30000");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> p = new KafkaProducer<>(pp);
        p.initTransactions();
        return p;
    }

    private static Properties consumerProps(String bootstrap, String isolation) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("isolation.level", isolation);
        cp.put("enable.auto.commit", "false");
        cp.put("request.timeout.ms", "15000");
        cp.put("default.api.timeout.ms", "20000");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        return cp;
    }

    /** One transaction writing `records`, each acknowledged before it ends. */
    private static void transaction(KafkaProducer<String, String> p,
                                    List<ProducerRecord<String, String>> records,
                                    boolean commit) throws Exception {
        p.beginTransaction();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (ProducerRecord<String, String> r : records) {
            sent.add(p.send(r));
        }
        for (Future<RecordMetadata> f : sent) {
            f.get(30, TimeUnit.SECONDS);
        }
        if (commit) {
            p.commitTransaction();
        } else {
            p.abortTransaction();
        }
    }

    /** `value` in each of the first `partitions` partitions of each topic. */
    private static List<ProducerRecord<String, String>> everywhere(
            String value, int partitions, String... topics) {
        List<ProducerRecord<String, String>> out = new ArrayList<>();
        for (String t : topics) {
            for (int p = 0; p < partitions; p++) {
                out.add(new ProducerRecord<>(t, p, null, value));
            }
        }
        return out;
    }

    private static List<TopicPartition> partitionsOf(int partitions, String... topics) {
        List<TopicPartition> out = new ArrayList<>();
        for (String t : topics) {
            for (int p = 0; p < partitions; p++) {
                out.add(new TopicPartition(t, p));
            }
        }
        return out;
    }

    /** Every record of `tps` from the start, read with assign() until "end" in each, as JSON. */
    private static String readToEnd(String bootstrap, String isolation, List<TopicPartition> tps) {
        StringBuilder out = new StringBuilder("[");
        Set<TopicPartition> ended = new HashSet<>();
        Properties cp = consumerProps(bootstrap, isolation);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (ended.size() < tps.size()) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(isolation + ": \"end\" only in " + ended
                            + " after 30s, read " + out + "]");
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (out.length() > 1) {
                        out.append(',');
                    }
                    out.append("[\"").append(r.topic()).append("\",").append(r.partition())
                            .append(',').append(r.offset())
                            .append(",\"").append(r.value()).append("\"]");
                    if ("end".equals(r.value())) {
                        ended.add(new TopicPartition(r.topic(), r.partition()));
                    }
                }
            }
        }
        return out.append(']').toString();
    }

    /** Records prefix0..prefix5, record i in partition i % 2. */
    private static List<ProducerRecord<String, String>> six(String topic, String prefix) {
        List<ProducerRecord<String, String>> out = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            out.add(new ProducerRecord<>(topic, i % 2, null, prefix + i));
        }
        return out;
    }

    private static String visibility(String bootstrap, String topic) throws Exception {
        createTopics(bootstrap, 2, topic);
        try (KafkaProducer<String, String> p = txnProducer(bootstrap, "tid-" + topic)) {
            transaction(p, six(topic, "c"), true);
            transaction(p, six(topic, "a"), false);
            transaction(p, everywhere("end", 2, topic), true);
        }
        List<TopicPartition> tps = partitionsOf(2, topic);
        return "{\"read_committed\":" + readToEnd(bootstrap, "read_committed", tps)
                + ",\"read_uncommitted\":" + readToEnd(bootstrap, "read_uncommitted", tps) + "}";
    }

    private static String atomic(String bootstrap, String a, String b) throws Exception {
        createTopics(bootstrap, 3, a, b);
        try (KafkaProducer<String, String> p = txnProducer(bootstrap, "tid-" + a)) {
            for (int n = 0; n < 10; n++) {
                transaction(p, everywhere(Integer.toString(n), 3, a, b), n % 2 == 0);
            }
            transaction(p, everywhere("end", 3, a, b), true);
        }
        List<TopicPartition> tps = partitionsOf(3, a, b);
        return "{\"read_committed\":" + readToEnd(bootstrap, "read_committed", tps) + "}";
    }

    /** The group's committed offset of `tp` as JSON (null for none). */
    private static String committed(KafkaConsumer<String, String> c, TopicPartition tp) {
        OffsetAndMetadata om = c.committed(Set.of(tp)).get(tp);
        return om == null ? "null" : Long.toString(om.offset());
    }

    /** A transaction producing one record and sending `offset` of `tp` for c's group. */
    private static void transactionWithOffset(KafkaProducer<String, String> p,
                                              KafkaConsumer<String, String> c,
                                              TopicPartition tp, long offset,
                                              boolean commit) throws Exception {
        p.beginTransaction();
        p.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, "x"))
                .get(30, TimeUnit.SECONDS);
        p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(offset)), c.groupMetadata());
        if (commit) {
            p.commitTransaction();
        } else {
            p.abortTransaction();
        }
    }

    private static String offsets(String bootstrap, String topic, String group) throws Exception {
        createTopics(bootstrap, 1, topic);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties cp = consumerProps(bootstrap, "read_committed");
        cp.put("group.id", group);
        // Named so that a change of the 4.x default cannot switch to KIP-848's protocol unnoticed.
        cp.put("group.protocol", "classic");
        try (KafkaProducer<String, String> p = txnProducer(bootstrap, "tid-" + topic);
             KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            transactionWithOffset(p, c, tp, 5, false);
            String afterAbort = committed(c, tp);
            transactionWithOffset(p, c, tp, 7, true);
            return "{\"after_abort\":" + afterAbort + ",\"after_commit\":" + committed(c, tp) + "}";
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String out = switch (args[1]) {
            case "visibility" -> visibility(bootstrap, args[2]);
            case "atomic" -> atomic(bootstrap, args[2], args[3]);
            case "offsets" -> offsets(bootstrap, args[2], args[3]);
            default -> throw new IllegalArgumentException("unknown scenario " + args[1]);
        };
        System.out.println(out);
    }
}
