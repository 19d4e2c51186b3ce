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
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const timeout = 60 * time.Second

type record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

type sent struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

type output struct {
	Created int32    `json:"created_partitions"`
	Sent    []sent   `json:"sent"`
	First   []record `json:"first"`
	Second  []record `json:"second"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// consume reads want records as a member of group, commits them, and leaves the group.
func consume(ctx context.Context, bootstrap, topic, group string, want int) []record {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		fail("consumer client: %v", err)
	}
	defer cl.Close()
	var got []record
	for len(got) < want {
		fetches := cl.PollRecords(ctx, want-len(got))
		if err := ctx.Err(); err != nil {
			fail("consumer: %v after %d records", err, len(got))
		}
		fetches.EachError(func(t string, p int32, err error) {
			fail("fetch %s-%d: %v", t, p, err)
		})
		var batch []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			batch = append(batch, r)
			got = append(got, record{r.Partition, r.Offset, string(r.Key), string(r.Value)})
		})
		if err := cl.CommitRecords(ctx, batch...); err != nil {
			fail("commit: %v", err)
		}
	}
	return got
}

func main() {
	if len(os.Args) != 5 {
		fail("usage: franz <bootstrap> <topic> <group> <count>")
	}
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	count, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fail("count: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out output

	admin, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		fail("admin client: %v", err)
	}
	created, err := kadm.NewClient(admin).CreateTopic(ctx, 2, 1, nil, topic)
	if err != nil {
		fail("create topic: %v", err)
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
		fail("producer client: %v", err)
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
			fail("produce %d: %v", i, err)
		}
		out.Sent = append(out.Sent, sent{r.Partition, r.Offset})
	}
	producer.Close()

	half := count / 2
	out.First = consume(ctx, bootstrap, topic, group, half)
	out.Second = consume(ctx, bootstrap, topic, group, count-half)
	line, err := json.Marshal(out)
	if err != nil {
		fail("json: %v", err)
	}
	fmt.Println(string(line))
}
