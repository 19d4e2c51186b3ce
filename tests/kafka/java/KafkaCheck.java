// The Apache Kafka Java client against strand: produce N records (acks=all, no
// idempotence: InitProducerId is not implemented yet), then read them back with assign()
// and no consumer group. Prints one line starting with "OK" and exits 0, or prints the
// problem and exits 1. Driven by tests/kafka/test_java.py.
//
// Usage: java -cp <kafka-clients and deps>:<classes> KafkaCheck <bootstrap> <topic> <count>
//        [<client property>=<value>...]   (e.g. security.protocol=SASL_PLAINTEXT: given to
//        both the producer and the consumer)

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class KafkaCheck {
    private KafkaCheck() {}

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties extra = new Properties();
        for (int a = 3; a < args.length; a++) {
            int eq = args[a].indexOf('=');
            check(eq > 0, "a client property is key=value: " + args[a]);
            extra.put(args[a].substring(0, eq), args[a].substring(eq + 1));
        }

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("enable.idempotence", "false");
        pp.put("linger.ms", "5");
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
            for (int i = 0; i < count; i++) {
                RecordMetadata md = sent.get(i).get();
                check(md.partition() == 0 && md.offset() == i,
                        "record " + i + " acknowledged at " + md.partition() + "/" + md.offset());
            }
        }

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "none");
        cp.put("request.timeout.ms", "15000");
        cp.put("default.api.timeout.ms", "20000");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.putAll(extra);
        int consumed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(Collections.singletonList(tp));
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(Collections.singletonList(tp));
            Map<TopicPartition, Long> end = consumer.endOffsets(Collections.singletonList(tp));
            check(begin.get(tp) == 0L, "beginning offset " + begin.get(tp));
            check(end.get(tp) == (long) count, "end offset " + end.get(tp) + " != " + count);
            consumer.seekToBeginning(Collections.singletonList(tp));
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (consumed < count) {
                check(System.nanoTime() < deadline, "consumed only " + consumed + " of " + count);
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    int i = consumed;
                    check(r.offset() == i, "offset " + r.offset() + " where " + i + " was expected");
                    check(("k" + i).equals(r.key()) && ("v" + i).equals(r.value()),
                            "record " + i + " is " + r.key() + "=" + r.value());
                    consumed++;
                }
            }
            check(consumer.position(tp) == count, "position " + consumer.position(tp));
        }
        System.out.println("OK produced=" + count + " consumed=" + consumed);
    }
}
