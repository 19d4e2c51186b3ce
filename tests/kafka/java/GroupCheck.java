// The Apache Kafka Java client's consumer groups against strand (driven by
// tests/kafka/test_groups.py), with the default producer configuration (acks=all,
// enable.idempotence=true):
// 1. produce n1 keyed records, KafkaConsumer.subscribe with group.id reads them all,
//    commitSync;
// 2. produce n2 more, a new consumer of the same group reads only those;
// 3. on the second broker, two consumers of one group (one thread each) split the
//    partitions, one closes (LeaveGroup), the other ends up with all of them.
// Prints one JSON line with what it saw and exits 0, or prints the problem and exits 1.
//
// Usage: java ... GroupCheck <bootstrap> <topic> <group> <bootstrap3> <topic3> <group3> <n1> <n2> [protocol]
// protocol: classic (default), consumer (KIP-848; the 4.x client), or mixed: phases 1
// and 2 classic, and in phase 3 one classic and one consumer-protocol member in the same
// group (Kafka 4's mixed groups); the consumer-protocol one leaves (the group goes back to
// the classic protocol) and the classic one ends up with all partitions.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class GroupCheck {
    private GroupCheck() {}

    /** group.protocol of every consumer: "classic" or "consumer" (KIP-848). */
    private static String protocol = "classic";

    private static void waitFor(BooleanSupplier cond, long timeoutMs, String what)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("timed out after " + timeoutMs + "ms waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    private static void produce(String bootstrap, String topic, int from, int to) throws Exception {
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("linger.ms", "2");
        pp.put("delivery.timeout.ms", "30000");
        pp.put("request.timeout.ms", "15000");
        pp.put("max.block.ms", "15000");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = from; i < to; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get();
            }
        }
    }

    /** The protocol of phases 1 and 2. */
    private static String plainProtocol() {
        return protocol.equals("mixed") ? "classic" : protocol;
    }

    private static Properties consumerProps(String bootstrap, String group, String proto) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        // Named so that the 4.x default changing cannot switch the protocol unnoticed.
        cp.put("group.protocol", proto);
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        cp.put("request.timeout.ms", "15000");
        cp.put("default.api.timeout.ms", "20000");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        return cp;
    }

    /** Reads n records with subscribe(), commitSync, close; appends them as JSON to out. */
    private static double consumeCommit(String bootstrap, String topic, String group, int n,
                                        StringBuilder out) {
        double first = -1;
        int got = 0;
        out.append('[');
        Properties cp = consumerProps(bootstrap, group, plainProtocol());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            long t0 = System.nanoTime();
            c.subscribe(Collections.singletonList(topic));
            long deadline = t0 + Duration.ofSeconds(30).toNanos();
            while (got < n) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("consumed only " + got + " of " + n);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (first < 0) {
                        first = (System.nanoTime() - t0) / 1e9;
                    }
                    if (got++ > 0) {
                        out.append(',');
                    }
                    out.append('[').append(r.partition()).append(',').append(r.offset())
                            .append(",\"").append(r.key()).append("\",\"").append(r.value()).append("\"]");
                }
            }
            c.commitSync();
        }
        out.append(']');
        return first;
    }

    /** One phase-3 member: polls in its own thread and publishes its assignment. */
    private static final class Member implements Runnable {
        final KafkaConsumer<String, String> consumer;
        final String topic;
        final AtomicReference<TreeSet<Integer>> assigned = new AtomicReference<>(new TreeSet<>());
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Throwable> error = new AtomicReference<>();
        Thread thread;

        Member(String bootstrap, String group, String topic, String proto) {
            Properties cp = consumerProps(bootstrap, group, proto);
            if (proto.equals("classic")) {
                // The consumer protocol takes both from the broker (KIP-848).
                cp.put("session.timeout.ms", "6000");
                cp.put("heartbeat.interval.ms", "300");
            }
            this.consumer = new KafkaConsumer<>(cp);
            this.topic = topic;
        }

        Member start() {
            thread = new Thread(this);
            thread.setDaemon(true);
            thread.start();
            return this;
        }

        @Override
        public void run() {
            try {
                consumer.subscribe(Collections.singletonList(topic));
                while (!stop.get()) {
                    consumer.poll(Duration.ofMillis(50));
                    TreeSet<Integer> s = new TreeSet<>();
                    for (TopicPartition tp : consumer.assignment()) {
                        s.add(tp.partition());
                    }
                    assigned.set(s);
                }
            } catch (Throwable t) {
                error.set(t);
            } finally {
                consumer.close();
            }
        }

        TreeSet<Integer> parts() {
            if (error.get() != null) {
                throw new IllegalStateException("member failed", error.get());
            }
            return assigned.get();
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(20000);
            if (thread.isAlive()) {
                throw new IllegalStateException("member did not close in 20s");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        String bootstrap3 = args[3];
        String topic3 = args[4];
        String group3 = args[5];
        int n1 = Integer.parseInt(args[6]);
        int n2 = Integer.parseInt(args[7]);
        if (args.length > 8) {
            protocol = args[8];
        }
        StringBuilder out = new StringBuilder("{");

        produce(bootstrap, topic, 0, n1);
        out.append("\"p1\":");
        double first = consumeCommit(bootstrap, topic, group, n1, out);
        out.append(",\"first_s\":").append(first);
        produce(bootstrap, topic, n1, n1 + n2);
        out.append(",\"p2\":");
        consumeCommit(bootstrap, topic, group, n2, out);

        long t0 = System.nanoTime();
        String protoA = plainProtocol();
        String protoB = protocol.equals("mixed") ? "consumer" : protocol;
        Member a = new Member(bootstrap3, group3, topic3, protoA).start();
        Member b = new Member(bootstrap3, group3, topic3, protoB).start();
        boolean bClosed = false;
        try {
            waitFor(() -> {
                TreeSet<Integer> pa = a.parts();
                TreeSet<Integer> pb = b.parts();
                TreeSet<Integer> all = new TreeSet<>(pa);
                all.addAll(pb);
                return !pa.isEmpty() && !pb.isEmpty() && pa.size() + pb.size() == 3 && all.size() == 3;
            }, 30000, "two members to split the partitions");
            out.append(",\"split\":[").append(a.parts()).append(',').append(b.parts()).append(']');
            out.append(",\"split_s\":").append((System.nanoTime() - t0) / 1e9);
            b.close();
            bClosed = true;
            long t1 = System.nanoTime();
            waitFor(() -> a.parts().size() == 3, 30000, "the remaining member to own all partitions");
            out.append(",\"after_leave\":").append(a.parts());
            out.append(",\"takeover_s\":").append((System.nanoTime() - t1) / 1e9);
        } finally {
            a.close();
            if (!bClosed) {
                b.close();
            }
        }
        out.append('}');
        System.out.println(out.toString().replace(" ", ""));
    }
}
