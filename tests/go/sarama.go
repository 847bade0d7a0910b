package main

import (
	"context"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig(codec string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.ClientID = "kbroker-sarama"
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Producer.Flush.Messages = 20
	switch codec {
	case "gzip":
		c.Producer.Compression = sarama.CompressionGZIP
	case "snappy":
		c.Producer.Compression = sarama.CompressionSnappy
	case "lz4":
		c.Producer.Compression = sarama.CompressionLZ4
	case "zstd":
		c.Producer.Compression = sarama.CompressionZSTD
	}
	if codec == "zstd" { // one idempotent producer (sarama's is opt-in)
		c.Producer.Idempotent = true
		c.Net.MaxOpenRequests = 1
	}
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	return c
}

func saramaChecks(bootstrap, topic, groupTopic string) {
	brokers := []string{bootstrap}
	for p, codec := range codecs {
		producer, err := sarama.NewSyncProducer(brokers, saramaConfig(codec))
		if err != nil {
			fail("sarama producer %s: %v", codec, err)
		}
		var msgs []*sarama.ProducerMessage
		for i := 0; i < records; i++ {
			e := expected(p, i)
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(p), Key: sarama.StringEncoder(e.Key),
				Value: sarama.StringEncoder(e.Value), Timestamp: e.Timestamp,
				Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte(e.Header)}}})
		}
		if err := producer.SendMessages(msgs); err != nil {
			fail("sarama produce %s: %v", codec, err)
		}
		emit(map[string]any{"client": "sarama", "check": "produced", "codec": codec, "partition": p,
			"first_offset": msgs[0].Offset, "last_offset": msgs[len(msgs)-1].Offset})
		producer.Close()
	}

	consumer, err := sarama.NewConsumer(brokers, saramaConfig("none"))
	if err != nil {
		fail("sarama consumer: %v", err)
	}
	matched, mismatches := 0, 0
	for p := range codecs {
		pc, err := consumer.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			fail("sarama consume partition %d: %v", p, err)
		}
		timeout := time.After(deadline)
		for n := 0; n < records; n++ {
			select {
			case m := <-pc.Messages():
				e := expected(p, int(m.Offset))
				if string(m.Key) == e.Key && string(m.Value) == e.Value && m.Timestamp.Equal(e.Timestamp) &&
					len(m.Headers) == 1 && string(m.Headers[0].Key) == "h" && string(m.Headers[0].Value) == e.Header {
					matched++
				} else {
					mismatches++
				}
			case err := <-pc.Errors():
				fail("sarama partition %d: %v", p, err)
			case <-timeout:
				fail("sarama partition %d: %d records in %s", p, n, deadline)
			}
		}
		pc.Close()
	}
	consumer.Close()
	emit(map[string]any{"client": "sarama", "check": "read_back", "matched": matched, "mismatches": mismatches})
	saramaGroup(bootstrap, groupTopic)
}

// groupHandler marks and commits every message it reads.
type groupHandler struct {
	mu       *sync.Mutex
	seen     map[string]int
	assigned *int
}

func (h groupHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ps := range s.Claims() {
		*h.assigned = len(ps)
	}
	return nil
}

func (h groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)]++
		h.mu.Unlock()
		s.MarkMessage(m, "")
		s.Commit() // synchronous: what was read is committed before the check ends
	}
	return nil
}

// saramaGroup: two members (sarama's default balancer, range) read the topic between them.
func saramaGroup(bootstrap, topic string) {
	group := topic + "-sarama"
	var mu sync.Mutex
	seen := map[string]int{}
	assigned := []int{0, 0}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var groups []sarama.ConsumerGroup
	for m := 0; m < 2; m++ {
		c := saramaConfig("none")
		c.Consumer.Offsets.AutoCommit.Enable = false
		g, err := sarama.NewConsumerGroup([]string{bootstrap}, group, c)
		if err != nil {
			fail("sarama group: %v", err)
		}
		groups = append(groups, g)
		h := groupHandler{mu: &mu, seen: seen, assigned: &assigned[m]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := g.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
					fail("sarama consume: %v", err)
				}
			}
		}()
	}
	end := time.Now().Add(deadline)
	for {
		mu.Lock()
		ok := len(seen) == groupRecords && assigned[0] > 0 && assigned[1] > 0
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(end) {
			fail("sarama group: read %d of %d, assigned %v", len(seen), groupRecords, assigned)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	duplicates := 0
	for _, n := range seen {
		duplicates += n - 1
	}
	emit(map[string]any{"client": "sarama", "check": "group", "group": group, "read": len(seen),
		"duplicates": duplicates, "assigned": assigned})
}
