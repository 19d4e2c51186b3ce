// Sarama against strand, with the client's default protocol version: its cluster admin
// creates the topic, an idempotent sync producer (acks=all) writes count records to
// partition i%2, then a consumer group member reads the first half, commits what it read
// and leaves, and a second member of the same group resumes after the commit and reads the
// rest.
//
// Usage: sarama <bootstrap> <topic> <group> <count>
// Prints one JSON line with what it saw; exits 1 with the error on stderr on failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/IBM/sarama"

	"strand.dev/kafka-go-checks/check"
)

type output struct {
	Sent   []check.Sent   `json:"sent"`
	First  []check.Record `json:"first"`
	Second []check.Record `json:"second"`
}

// reader is a consumer group handler that keeps want records, marking and committing each.
type reader struct {
	want int
	mu   sync.Mutex
	got  []check.Record
	done context.CancelFunc
}

func (r *reader) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (r *reader) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (r *reader) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		r.mu.Lock()
		if len(r.got) >= r.want {
			r.mu.Unlock()
			return nil
		}
		r.got = append(r.got, check.Record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)})
		full := len(r.got) >= r.want
		r.mu.Unlock()
		sess.MarkMessage(m, "")
		sess.Commit()
		if full {
			r.done()
			return nil
		}
	}
	return nil
}

// consume reads want records as a member of group, commits them, and leaves the group.
func consume(bootstrap, topic, group string, want int) []check.Record {
	cfg := sarama.NewConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Return.Errors = true
	g, err := sarama.NewConsumerGroup([]string{bootstrap}, group, cfg)
	if err != nil {
		check.Fail("consumer group: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), check.Timeout)
	defer cancel()
	go func() {
		for err := range g.Errors() {
			fmt.Fprintf(os.Stderr, "consumer group error: %v\n", err)
		}
	}()
	r := &reader{want: want, done: cancel}
	for ctx.Err() == nil {
		if err := g.Consume(ctx, []string{topic}, r); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
			check.Fail("consume: %v", err)
		}
	}
	if err := g.Close(); err != nil {
		check.Fail("close: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) < want {
		check.Fail("consumer: timed out after %d of %d records", len(r.got), want)
	}
	return r.got
}

func main() {
	if len(os.Args) != 5 {
		check.Fail("usage: sarama <bootstrap> <topic> <group> <count>")
	}
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	count, err := strconv.Atoi(os.Args[4])
	if err != nil {
		check.Fail("count: %v", err)
	}
	var out output

	admin, err := sarama.NewClusterAdmin([]string{bootstrap}, sarama.NewConfig())
	if err != nil {
		check.Fail("cluster admin: %v", err)
	}
	detail := &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		check.Fail("create topic: %v", err)
	}
	admin.Close()

	cfg := sarama.NewConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer([]string{bootstrap}, cfg)
	if err != nil {
		check.Fail("producer: %v", err)
	}
	for i := 0; i < count; i++ {
		p, off, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic:     topic,
			Partition: int32(i % 2),
			Key:       sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value:     sarama.StringEncoder(fmt.Sprintf("v%d", i)),
		})
		if err != nil {
			check.Fail("produce %d: %v", i, err)
		}
		out.Sent = append(out.Sent, check.Sent{Partition: p, Offset: off})
	}
	if err := producer.Close(); err != nil {
		check.Fail("producer close: %v", err)
	}

	half := count / 2
	out.First = consume(bootstrap, topic, group, half)
	out.Second = consume(bootstrap, topic, group, count-half)
	check.Print(out)
}
