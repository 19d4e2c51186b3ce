// One run of a Kafka Streams 4.x application against strand (driven by
// tests/kafka/test_streams.py): a KTable count() per key of <input>, at-least-once, in
// `Stores.inMemoryKeyValueStore("counts")` (so every start restores the whole store from its
// changelog, <app-id>-counts-changelog, whose segments roll every 500 ms so that strand
// compacts it), each new count sent to <output> as a string.
//
// The run waits until the application is RUNNING, then produces the input records
// <from>..<to> (key "k" + i % <keys>, value "v" + i) in <bursts> bursts 600 ms apart (so the
// changelog spans several segments), waits until the application has processed every one of
// them, closes it (which flushes and commits) and prints one JSON line:
// {"restored": <changelog records restored into the store>, "processed": <records>}.
// Exits 1 with the problem on stderr when a deadline passes or the application fails.
//
// Usage: java ... StreamsCheck <bootstrap> <app-id> <input> <output> <state-dir> <keys>
//                              <from> <to> <bursts> [<processing.guarantee>]
// (the guarantee defaults to at_least_once; exactly_once_v2 runs it with transactions).

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.Stores;

public final class StreamsCheck {
    private StreamsCheck() {}

    private static void waitFor(BooleanSupplier cond, long timeoutMs, String what,
                                AtomicReference<Throwable> failure) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        while (!cond.getAsBoolean()) {
            if (failure.get() != null) {
                throw new IllegalStateException("the application failed while waiting for " + what,
                        failure.get());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("timed out after " + timeoutMs + "ms waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String output = args[3];
        String stateDir = args[4];
        int keys = Integer.parseInt(args[5]);
        int from = Integer.parseInt(args[6]);
        int to = Integer.parseInt(args[7]);
        int bursts = Integer.parseInt(args[8]);
        String guarantee = args.length > 9 ? args[9] : StreamsConfig.AT_LEAST_ONCE;

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        // The classic rebalance protocol (strand has no KIP-848/KIP-1071 groups).
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "classic");
        // Every update goes to the changelog and the output (no record cache).
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        // The internal topics (the changelog) roll a segment every 500 ms, so the cleaner
        // has closed segments to compact.
        p.put(StreamsConfig.topicPrefix("segment.ms"), "500");
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 500);

        Set<String> seen = ConcurrentHashMap.newKeySet();
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> seen.add(v))
                .groupByKey()
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                        .withKeySerde(Serdes.String())
                        .withValueSerde(Serdes.Long()))
                .toStream()
                .mapValues(v -> Long.toString(v))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        AtomicLong restored = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {}

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long end, long n) {}

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                restored.addAndGet(total);
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        try {
            streams.start();
            waitFor(() -> streams.state() == KafkaStreams.State.RUNNING, 60000,
                    "the application to be RUNNING", failure);

            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            pp.put("acks", "all");
            pp.put("linger.ms", "5");
            pp.put("enable.idempotence", "false");
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                int per = (to - from + bursts - 1) / bursts;
                for (int start = from; start < to; start += per) {
                    if (start > from) {
                        Thread.sleep(600);
                    }
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (int i = start; i < Math.min(to, start + per); i++) {
                        sent.add(producer.send(new ProducerRecord<>(input, "k" + (i % keys), "v" + i)));
                    }
                    producer.flush();
                    for (Future<RecordMetadata> f : sent) {
                        f.get();
                    }
                }
            }
            int want = to - from;
            waitFor(() -> seen.size() >= want, 60000, "the application to process " + want
                    + " records", failure);
            // A task processes records only once its store is restored: by now the restore
            // listener has counted every changelog partition.
            if (failure.get() != null) {
                throw new IllegalStateException("the application failed", failure.get());
            }
        } finally {
            if (!streams.close(Duration.ofSeconds(30))) {
                System.err.println("KafkaStreams.close did not finish within 30s");
                System.exit(1);
            }
        }
        if (streams.state() != KafkaStreams.State.NOT_RUNNING || failure.get() != null) {
            throw new IllegalStateException("closed in state " + streams.state(), failure.get());
        }
        System.out.println("{\"restored\":" + restored.get() + ",\"processed\":" + seen.size() + "}");
    }
}
