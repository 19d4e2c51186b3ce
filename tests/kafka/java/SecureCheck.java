// The Apache Kafka Java client over one of strand's secured listeners (SASL_SSL, SSL with
// a client certificate), driven by tests/kafka/test_tls_clients.py: produce <count>
// records to partition 0 of <topic> (acks=all, idempotent), read them with a consumer of
// group <group> (subscribe), commitSync, and read the group's committed offset back with
// a second consumer. Prints "OK produced=N consumed=N committed=N" and exits 0, or prints
// the problem and exits 1.
//
// Usage: java ... SecureCheck <bootstrap> <topic> <group> <count> [<client property>=<value>...]
//        (the security settings, given to the producer and both consumers)

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class SecureCheck {
    private SecureCheck() {}

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what);
        }
    }

    private static Properties consumerProps(String bootstrap, String group, Properties extra) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.putAll(extra);
        return cp;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties extra = new Properties();
        for (int a = 4; a < args.length; a++) {
            int eq = args[a].indexOf('=');
            check(eq > 0, "a client property is key=value: " + args[a]);
            extra.put(args[a].substring(0, eq), args[a].substring(eq + 1));
        }

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("delivery.timeout.ms", "30000");
        pp.put("request.timeout.ms", "15000");
        pp.put("max.block.ms", "15000");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.putAll(extra);
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get();
            }
        }

        int consumed = 0;
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(consumerProps(bootstrap, group, extra))) {
            consumer.subscribe(Collections.singletonList(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (consumed < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    check(r.value().equals("v" + r.offset()), "record " + r.offset() + " is " + r.value());
                    consumed++;
                }
            }
            check(consumed == count, "consumed " + consumed + " of " + count);
            consumer.commitSync(Duration.ofSeconds(30));
        }

        long committed;
        try (KafkaConsumer<String, String> reader =
                new KafkaConsumer<>(consumerProps(bootstrap, group, extra))) {
            Map<TopicPartition, OffsetAndMetadata> c =
                reader.committed(Collections.singleton(tp), Duration.ofSeconds(30));
            check(c.get(tp) != null, "no committed offset");
            committed = c.get(tp).offset();
        }
        check(committed == count, "committed " + committed + ", expected " + count);
        System.out.println("OK produced=" + count + " consumed=" + consumed + " committed=" + committed);
    }
}
