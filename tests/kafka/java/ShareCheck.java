// Share groups (KIP-932) with the Apache Kafka 4.1 Java client's KafkaShareConsumer against
// strand, driven by tests/kafka/test_share_groups.py, which produces the records, sets the
// group's share.auto.offset.reset=earliest first and asserts on what this prints. Every
// consumer has its group.id, share.acknowledgement.mode=explicit (each record acknowledged
// with a type, then commitSync), string deserializers and a client.id naming it.
// Prints one JSON line with what it observed and exits 0; asserts nothing beyond sanity
// (usage, a consumer that gets nothing at all); a problem prints to stderr and exits 1.
//
// Usage: java ... ShareCheck <bootstrap> <topic> <group> <mode> [mode arguments]
//   share N COUNT          N consumers in N threads ACCEPT every record (10 ms of work each)
//                          until the union of accepted offsets reaches COUNT (or 60 s):
//                          {"by_consumer": {name: [offset...]},
//                           "delivery_counts": {offset: max deliveryCount}}
//   crash-holder COUNT     polls until it holds at least one record, prints
//                          {"held": [offset...]} and halts without acknowledging or closing
//   hang-holder SECONDS    the same, then stays alive and connected for SECONDS without
//                          polling or acknowledging (a stuck application), then halts
//                          (COUNT, the records in the topic, is only for the log of the run)
//   drain COUNT TIMEOUT_S  ACCEPTs everything until COUNT distinct offsets or TIMEOUT_S:
//                          {"accepted": [offset...], "delivery_counts": {offset: count}}
//   reject-even COUNT      REJECTs even offsets, ACCEPTs odd ones until it saw all COUNT,
//                          then polls 5 s more: {"first": [offset...], "again": [offset...]}
//   poison OFFSET TIMEOUT_S  RELEASEs OFFSET each time it comes, ACCEPTs the others, for
//                          TIMEOUT_S: {"poison_deliveries": [deliveryCount...],
//                          "accepted": [offset...]}
//   accept-some K          ACCEPTs the first K records, then close() (which releases the
//                          rest of what it holds): {"accepted": [offset...],
//                          "left": [offsets of its last poll left unacknowledged]}
//   offsets                Admin.listShareGroupOffsets of the group (DescribeShareGroupOffsets)
//                          for partition 0 of the topic: {"start_offsets": {"P": offset}},
//                          a partition without an offset left out, or {"error": "..."}
//   delete                 Admin.deleteShareGroups of the group: {"deleted": true} or
//                          {"deleted": false, "error": "<exception class>"}
//   alter OFFSET           Admin.alterShareGroupOffsets of the group: partition 0 of the
//                          topic starts at OFFSET: {"altered": true} or
//                          {"altered": false, "error": "<exception class>"}
//   delete-offsets         Admin.deleteShareGroupOffsets of the group for the topic:
//                          {"deleted": true} or {"deleted": false, "error": "<exception class>"}
// Every output but crash-holder's also has "commit_errors": the exceptions commitSync
// reported per partition.
// A list of accepted offsets keeps repeats: an offset accepted twice shows twice.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ShareCheck {
    private ShareCheck() {}

    private static final Duration POLL = Duration.ofMillis(200);
    /** close() waits this long at most for its acknowledgements and the leave. */
    private static final Duration CLOSE = Duration.ofSeconds(10);
    /** How long a mode waits for records that must come before it gives up. */
    private static final long FIRST_DEADLINE_MS = 30_000;
    /** `share`: the time a member spends on each record it accepted (300 records take one
     *  member alone 3 s: in CI at 2 ms one member drained them all before the others
     *  joined). */
    private static final long WORK_MS = 10;
    /** `share`: the whole run's deadline. */
    private static final long SHARE_DEADLINE_MS = 60_000;
    /** `reject-even`: how long it keeps polling for redeliveries after the first pass. */
    private static final long AGAIN_MS = 5_000;

    /** Exceptions commitSync reported, as "topic-partition: message", from every thread. */
    private static final List<String> COMMIT_ERRORS = Collections.synchronizedList(new ArrayList<>());

    private static KafkaShareConsumer<String, String> consumer(String bootstrap, String topic,
                                                               String group, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", clientId);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        // Sent as ShareFetch's MaxRecords: one fetch acquires about ten records, not the
        // whole partition, so that several consumers of one partition each get some.
        p.put("max.poll.records", "10");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "20000");
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        c.subscribe(Collections.singletonList(topic));
        return c;
    }

    private static long deadline(long ms) {
        return System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
    }

    private static boolean before(long deadlineNanos) {
        return System.nanoTime() - deadlineNanos < 0;
    }

    private static short deliveryCount(ConsumerRecord<String, String> r) {
        Optional<Short> n = r.deliveryCount();
        return n.orElse((short) -1);
    }

    /** commitSync, keeping what it reports per partition. */
    private static void commit(KafkaShareConsumer<String, String> c) {
        Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
            e.getValue().ifPresent(ex -> COMMIT_ERRORS.add(
                    e.getKey().topic() + "-" + e.getKey().partition() + ": " + ex));
        }
    }

    // -- JSON ---------------------------------------------------------------------------

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }

    private static String list(Collection<? extends Number> xs) {
        StringBuilder b = new StringBuilder("[");
        for (Number x : xs) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append(x);
        }
        return b.append(']').toString();
    }

    private static String counts(Map<Long, Short> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<Long, Short> e : new TreeMap<>(m).entrySet()) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        return b.append('}').toString();
    }

    private static String commitErrors() {
        StringBuilder b = new StringBuilder("[");
        synchronized (COMMIT_ERRORS) {
            for (String s : COMMIT_ERRORS) {
                if (b.length() > 1) {
                    b.append(',');
                }
                b.append(quote(s));
            }
        }
        return b.append(']').toString();
    }

    // -- modes --------------------------------------------------------------------------

    /** The running maximum of a record's delivery counts. */
    private static void noteCount(Map<Long, Short> counts, ConsumerRecord<String, String> r) {
        counts.merge(r.offset(), deliveryCount(r), (a, b) -> a >= b ? a : b);
    }

    /** One `share` member: its own consumer in its own thread. */
    private static final class Member implements Runnable {
        final String name;
        final List<Long> accepted = Collections.synchronizedList(new ArrayList<>());
        final AtomicReference<Throwable> error = new AtomicReference<>();
        private final String bootstrap;
        private final String topic;
        private final String group;
        private final Set<Long> union;
        private final Map<Long, Short> counts;
        private final long count;
        private final long deadlineNanos;
        private final CountDownLatch subscribed;

        Member(String name, String bootstrap, String topic, String group, Set<Long> union,
               Map<Long, Short> counts, long count, long deadlineNanos, CountDownLatch subscribed) {
            this.name = name;
            this.bootstrap = bootstrap;
            this.topic = topic;
            this.group = group;
            this.union = union;
            this.counts = counts;
            this.count = count;
            this.deadlineNanos = deadlineNanos;
            this.subscribed = subscribed;
        }

        @Override
        public void run() {
            try {
                KafkaShareConsumer<String, String> c = consumer(bootstrap, topic, group, name);
                try {
                    // Every member subscribes (and so starts joining) before any polls:
                    // the first must not have the partition to itself while the others
                    // are still being built.
                    subscribed.countDown();
                    subscribed.await(FIRST_DEADLINE_MS, TimeUnit.MILLISECONDS);
                    while (union.size() < count && before(deadlineNanos)) {
                        ConsumerRecords<String, String> recs = c.poll(POLL);
                        for (ConsumerRecord<String, String> r : recs) {
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                            accepted.add(r.offset());
                            union.add(r.offset());
                            noteCount(counts, r);
                        }
                        if (!recs.isEmpty()) {
                            commit(c);
                            // Work takes time: one member alone does not drain the topic
                            // while the others' joins are still being made durable.
                            Thread.sleep(WORK_MS * recs.count());
                        }
                    }
                } finally {
                    c.close(CLOSE);
                }
            } catch (Throwable t) {
                error.set(t);
                subscribed.countDown(); // the others do not wait for a member that failed
            }
        }
    }

    private static String share(String bootstrap, String topic, String group, int n, long count)
            throws InterruptedException {
        Set<Long> union = ConcurrentHashMap.newKeySet();
        Map<Long, Short> counts = new ConcurrentHashMap<>();
        CountDownLatch subscribed = new CountDownLatch(n);
        long end = deadline(SHARE_DEADLINE_MS);
        List<Member> members = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Member m = new Member("share-check-" + i, bootstrap, topic, group, union, counts,
                    count, end, subscribed);
            Thread t = new Thread(m, m.name);
            t.setDaemon(true);
            t.start();
            members.add(m);
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join(SHARE_DEADLINE_MS + 2 * CLOSE.toMillis());
            if (t.isAlive()) {
                throw new IllegalStateException(t.getName() + " did not finish");
            }
        }
        StringBuilder b = new StringBuilder("{\"by_consumer\":{");
        for (Member m : members) {
            if (m.error.get() != null) {
                throw new IllegalStateException(m.name + " failed", m.error.get());
            }
            if (b.charAt(b.length() - 1) != '{') {
                b.append(',');
            }
            synchronized (m.accepted) {
                b.append(quote(m.name)).append(':').append(list(m.accepted));
            }
        }
        return b.append("},\"delivery_counts\":").append(counts(counts)).append('}').toString();
    }

    /** Polls until it holds at least one record; prints {"held": [offset...]}. */
    private static void holdSome(KafkaShareConsumer<String, String> c) {
        long end = deadline(FIRST_DEADLINE_MS);
        List<Long> held = new ArrayList<>();
        while (held.isEmpty()) {
            if (!before(end)) {
                throw new IllegalStateException("no record within " + FIRST_DEADLINE_MS + " ms");
            }
            for (ConsumerRecord<String, String> r : c.poll(POLL)) {
                held.add(r.offset());
            }
        }
        System.out.println("{\"held\":" + list(held) + "}");
        System.out.flush();
    }

    private static void crashHolder(String bootstrap, String topic, String group) {
        holdSome(consumer(bootstrap, topic, group, "share-check-holder"));
        // Dies as a crash would: no acknowledgement, no close, no leave. Its connection
        // ends, and the broker gives its records back (Kafka's disconnect listener).
        Runtime.getRuntime().halt(0);
    }

    private static void hangHolder(String bootstrap, String topic, String group, long holdMs)
            throws InterruptedException {
        holdSome(consumer(bootstrap, topic, group, "share-check-hanger"));
        // Hangs as a stuck application would: alive, connected, heartbeating, but neither
        // polling nor acknowledging. The records come back only when their locks run out.
        Thread.sleep(holdMs);
        Runtime.getRuntime().halt(0);
    }

    private static String drain(String bootstrap, String topic, String group, long count,
                                long timeoutMs) {
        List<Long> accepted = new ArrayList<>();
        Set<Long> distinct = new HashSet<>();
        Map<Long, Short> counts = new TreeMap<>();
        long end = deadline(timeoutMs);
        KafkaShareConsumer<String, String> c = consumer(bootstrap, topic, group, "share-check-drain");
        try {
            while (distinct.size() < count && before(end)) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    accepted.add(r.offset());
                    distinct.add(r.offset());
                    noteCount(counts, r);
                }
                if (!recs.isEmpty()) {
                    commit(c);
                }
            }
        } finally {
            c.close(CLOSE);
        }
        return "{\"accepted\":" + list(accepted) + ",\"delivery_counts\":" + counts(counts) + "}";
    }

    private static String rejectEven(String bootstrap, String topic, String group, long count) {
        List<Long> first = new ArrayList<>();
        List<Long> again = new ArrayList<>();
        Set<Long> seen = new HashSet<>();
        KafkaShareConsumer<String, String> c = consumer(bootstrap, topic, group, "share-check-reject");
        try {
            long end = deadline(FIRST_DEADLINE_MS);
            while (seen.size() < count && before(end)) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    (seen.add(r.offset()) ? first : again).add(r.offset());
                    c.acknowledge(r, r.offset() % 2 == 0 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT);
                }
                if (!recs.isEmpty()) {
                    commit(c);
                }
            }
            // Longer than the tests' acquisition lock: a record left unsettled by the
            // broker would come back within it.
            end = deadline(AGAIN_MS);
            while (before(end)) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    again.add(r.offset());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                if (!recs.isEmpty()) {
                    commit(c);
                }
            }
        } finally {
            c.close(CLOSE);
        }
        return "{\"first\":" + list(first) + ",\"again\":" + list(again) + "}";
    }

    private static String poison(String bootstrap, String topic, String group, long offset,
                                 long timeoutMs) {
        List<Short> deliveries = new ArrayList<>();
        List<Long> accepted = new ArrayList<>();
        KafkaShareConsumer<String, String> c = consumer(bootstrap, topic, group, "share-check-poison");
        try {
            long end = deadline(timeoutMs);
            while (before(end)) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    if (r.offset() == offset) {
                        deliveries.add(deliveryCount(r));
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    } else {
                        accepted.add(r.offset());
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                }
                if (!recs.isEmpty()) {
                    commit(c);
                }
            }
        } finally {
            c.close(CLOSE);
        }
        return "{\"poison_deliveries\":" + list(deliveries) + ",\"accepted\":" + list(accepted) + "}";
    }

    private static String acceptSome(String bootstrap, String topic, String group, int k) {
        List<Long> accepted = new ArrayList<>();
        List<Long> left = new ArrayList<>();
        KafkaShareConsumer<String, String> c = consumer(bootstrap, topic, group, "share-check-some");
        try {
            long end = deadline(FIRST_DEADLINE_MS);
            // Polls again only when every record of the last poll was acknowledged
            // (explicit mode refuses the poll otherwise): the records past the K-th, left
            // unacknowledged, are all of the last poll.
            while (accepted.size() < k) {
                if (!before(end)) {
                    throw new IllegalStateException("accepted " + accepted.size() + " of " + k);
                }
                ConsumerRecords<String, String> recs = c.poll(POLL);
                boolean acked = false;
                for (ConsumerRecord<String, String> r : recs) {
                    if (accepted.size() < k) {
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.add(r.offset());
                        acked = true;
                    } else {
                        left.add(r.offset());
                    }
                }
                if (acked) {
                    commit(c);
                }
            }
        } finally {
            // What it holds unacknowledged goes back to the group when the consumer closes
            // its share session (KIP-932), without waiting for the locks to run out.
            c.close(CLOSE);
        }
        return "{\"accepted\":" + list(accepted) + ",\"left\":" + list(left) + "}";
    }

    private static long arg(String[] rest, int i, String mode) {
        if (rest.length <= i) {
            throw new IllegalArgumentException(mode + ": missing argument " + (i + 1));
        }
        return Long.parseLong(rest[i]);
    }

    private static String offsets(String bootstrap, String topic, String group) throws InterruptedException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(props)) {
            ListShareGroupOffsetsSpec spec = new ListShareGroupOffsetsSpec().topicPartitions(List.of(tp));
            Map<TopicPartition, OffsetAndMetadata> got = admin
                .listShareGroupOffsets(Map.of(group, spec))
                .partitionsToOffsetAndMetadata(group)
                .get(30, TimeUnit.SECONDS);
            OffsetAndMetadata start = got.get(tp);
            String known = start == null ? "" : "\"0\":" + start.offset();
            return "{\"start_offsets\":{" + known + "}}";
        } catch (java.util.concurrent.ExecutionException e) {
            return "{\"error\":\"" + e.getCause().getClass().getSimpleName() + "\"}";
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("listShareGroupOffsets timed out", e);
        }
    }

    private static String delete(String bootstrap, String group) throws InterruptedException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            admin.deleteShareGroups(List.of(group)).all().get(30, TimeUnit.SECONDS);
            return "{\"deleted\":true}";
        } catch (java.util.concurrent.ExecutionException e) {
            return "{\"deleted\":false,\"error\":\"" + e.getCause().getClass().getSimpleName() + "\"}";
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("deleteShareGroups timed out", e);
        }
    }

    /** `alter` and `delete-offsets`: an Admin call's outcome as {"KEY": true} or its error. */
    private static String outcome(String key, String what, KafkaFuture<Void> done) throws InterruptedException {
        try {
            done.get(30, TimeUnit.SECONDS);
            return "{\"" + key + "\":true}";
        } catch (java.util.concurrent.ExecutionException e) {
            return "{\"" + key + "\":false,\"error\":\"" + e.getCause().getClass().getSimpleName() + "\"}";
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException(what + " timed out", e);
        }
    }

    private static String alter(String bootstrap, String topic, String group, long offset) throws InterruptedException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartition, Long> to = Map.of(new TopicPartition(topic, 0), offset);
            return outcome("altered", "alterShareGroupOffsets", admin.alterShareGroupOffsets(group, to).all());
        }
    }

    private static String deleteOffsets(String bootstrap, String topic, String group) throws InterruptedException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            return outcome("deleted", "deleteShareGroupOffsets",
                admin.deleteShareGroupOffsets(group, Set.of(topic)).all());
        }
    }

    private static String run(String bootstrap, String topic, String group, String mode,
                              String[] rest) throws InterruptedException {
        switch (mode) {
            case "share":
                return share(bootstrap, topic, group, (int) arg(rest, 0, mode), arg(rest, 1, mode));
            case "crash-holder":
                crashHolder(bootstrap, topic, group);
                throw new IllegalStateException("crash-holder did not halt");
            case "hang-holder":
                hangHolder(bootstrap, topic, group, arg(rest, 0, mode) * 1000);
                throw new IllegalStateException("hang-holder did not halt");
            case "drain":
                return drain(bootstrap, topic, group, arg(rest, 0, mode), arg(rest, 1, mode) * 1000);
            case "reject-even":
                return rejectEven(bootstrap, topic, group, arg(rest, 0, mode));
            case "poison":
                return poison(bootstrap, topic, group, arg(rest, 0, mode), arg(rest, 1, mode) * 1000);
            case "accept-some":
                return acceptSome(bootstrap, topic, group, (int) arg(rest, 0, mode));
            case "offsets":
                return offsets(bootstrap, topic, group);
            case "delete":
                return delete(bootstrap, group);
            case "alter":
                return alter(bootstrap, topic, group, arg(rest, 0, mode));
            case "delete-offsets":
                return deleteOffsets(bootstrap, topic, group);
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    public static void main(String[] args) {
        if (args.length < 4) {
            System.err.println("usage: ShareCheck <bootstrap> <topic> <group> <mode> [args]");
            System.exit(2);
        }
        String mode = args[3];
        String out;
        try {
            out = run(args[0], args[1], args[2], mode, Arrays.copyOfRange(args, 4, args.length));
        } catch (Exception e) {
            System.err.println("ShareCheck " + mode + " failed: " + e);
            e.printStackTrace();
            System.exit(1);
            return;
        }
        // Every mode's output is one object: the commit errors join it as its last key.
        System.out.println(out.substring(0, out.length() - 1) + ",\"commit_errors\":" + commitErrors() + "}");
        System.out.flush();
        // Nothing is left to wait for; a consumer thread that did not stop must not keep
        // the JVM alive.
        System.exit(0);
    }
}
