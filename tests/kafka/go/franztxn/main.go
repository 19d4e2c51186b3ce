// franz-go transactions against strand: kadm creates the topic (2 partitions), then a
// transactional producer runs transactions n = 0..5, each writing "<n>-<p>" to both
// partitions, committing the even ones and aborting the odd ones; a read_committed
// consumer then reads both partitions from the start. franz-go uses transaction protocol
// version 2 (KIP-890 part 2) when the broker finalizes transaction.version 2.
//
// Usage: franztxn <bootstrap> <topic> <transactional id>
// Prints one JSON line {"read_committed": [values in read order]}; exits 1 with the error
// on stderr on failure.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"strand.dev/kafka-go-checks/check"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const transactions = 6

type output struct {
	ReadCommitted []string `json:"read_committed"`
}

func main() {
	if len(os.Args) != 4 {
		check.Fail("usage: franztxn <bootstrap> <topic> <transactional id>")
	}
	bootstrap, topic, id := os.Args[1], os.Args[2], os.Args[3]
	ctx, cancel := context.WithTimeout(context.Background(), check.Timeout)
	defer cancel()

	admin, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		check.Fail("admin client: %v", err)
	}
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		check.Fail("create topic: %v", err)
	}
	admin.Close()

	producer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		check.Fail("producer client: %v", err)
	}
	for n := 0; n < transactions; n++ {
		if err := producer.BeginTransaction(); err != nil {
			check.Fail("begin %d: %v", n, err)
		}
		for p := int32(0); p < 2; p++ {
			r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("%d-%d", n, p))}
			if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
				check.Fail("produce %d-%d: %v", n, p, err)
			}
		}
		commit := kgo.TryCommit
		if n%2 == 1 {
			commit = kgo.TryAbort
		}
		if err := producer.EndTransaction(ctx, commit); err != nil {
			check.Fail("end %d: %v", n, err)
		}
	}
	producer.Close()

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()},
		}),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		check.Fail("consumer client: %v", err)
	}
	defer consumer.Close()
	var out output
	want := (transactions + 1) / 2 * 2
	idleUntil := time.Now().Add(3 * time.Second)
	for len(out.ReadCommitted) < want || time.Now().Before(idleUntil) {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			check.Fail("consumer: %v after %d records", err, len(out.ReadCommitted))
		}
		fetches.EachError(func(t string, p int32, err error) {
			check.Fail("fetch %s-%d: %v", t, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			out.ReadCommitted = append(out.ReadCommitted, string(r.Value))
			idleUntil = time.Now().Add(2 * time.Second)
		})
		if len(out.ReadCommitted) >= want {
			// Anything more (an aborted record) would arrive within the idle time.
			pollCtx, stop := context.WithDeadline(ctx, idleUntil)
			more := consumer.PollFetches(pollCtx)
			stop()
			more.EachRecord(func(r *kgo.Record) {
				out.ReadCommitted = append(out.ReadCommitted, string(r.Value))
			})
			break
		}
	}
	check.Print(out)
}
