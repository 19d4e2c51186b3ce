// franz-go against strand: kadm creates the topic, an idempotent producer (acks=all, the
// client's default) writes count records to partition i%2, then a consumer in a group reads
// the first half, commits what it read and leaves, and a second consumer of the same group
// resumes after the commit and reads the rest.
//
// Usage: franz <bootstrap> <topic> <group> <count>
// Prints one JSON line with what it saw; exits 1 with the error on stderr on failure.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"strand.dev/kafka-go-checks/check"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type output struct {
	Created int32          `json:"created_partitions"`
	Sent    []check.Sent   `json:"sent"`
	First   []check.Record `json:"first"`
	Second  []check.Record `json:"second"`
}

// consume reads want records as a member of group, commits them, and leaves the group.
func consume(ctx context.Context, bootstrap, topic, group string, want int) []check.Record {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		check.Fail("consumer client: %v", err)
	}
	defer cl.Close()
	var got []check.Record
	for len(got) < want {
		fetches := cl.PollRecords(ctx, want-len(got))
		if err := ctx.Err(); err != nil {
			check.Fail("consumer: %v after %d records", err, len(got))
		}
		fetches.EachError(func(t string, p int32, err error) {
			check.Fail("fetch %s-%d: %v", t, p, err)
		})
		var batch []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			batch = append(batch, r)
			got = append(got, check.Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
		})
		if err := cl.CommitRecords(ctx, batch...); err != nil {
			check.Fail("commit: %v", err)
		}
	}
	return got
}

func main() {
	if len(os.Args) != 5 {
		check.Fail("usage: franz <bootstrap> <topic> <group> <count>")
	}
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	count, err := strconv.Atoi(os.Args[4])
	if err != nil {
		check.Fail("count: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), check.Timeout)
	defer cancel()
	var out output

	admin, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		check.Fail("admin client: %v", err)
	}
	created, err := kadm.NewClient(admin).CreateTopic(ctx, 2, 1, nil, topic)
	if err != nil {
		check.Fail("create topic: %v", err)
	}
	out.Created = created.NumPartitions
	admin.Close()

	// Idempotent (franz-go's default) with acks=all; records go to the partition they name.
	producer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		check.Fail("producer client: %v", err)
	}
	for i := 0; i < count; i++ {
		r := &kgo.Record{
			Topic:     topic,
			Partition: int32(i % 2),
			Key:       []byte(fmt.Sprintf("k%d", i)),
			Value:     []byte(fmt.Sprintf("v%d", i)),
		}
		res := producer.ProduceSync(ctx, r)
		if err := res.FirstErr(); err != nil {
			check.Fail("produce %d: %v", i, err)
		}
		out.Sent = append(out.Sent, check.Sent{Partition: r.Partition, Offset: r.Offset})
	}
	producer.Close()

	half := count / 2
	out.First = consume(ctx, bootstrap, topic, group, half)
	out.Second = consume(ctx, bootstrap, topic, group, count-half)
	check.Print(out)
}
