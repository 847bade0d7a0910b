package main

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func franzCodec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// franz: franz-go's producer is idempotent with acks=all by default.
func franz(bootstrap, topic, groupTopic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*deadline)
	defer cancel()
	for p, codec := range codecs {
		cl, err := kgo.NewClient(franzOpts(bootstrap, kgo.ProducerBatchCompression(franzCodec(codec)),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
		if err != nil {
			fail("franz client: %v", err)
		}
		var rs []*kgo.Record
		for i := 0; i < records; i++ {
			e := expected(p, i)
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(e.Key), Value: []byte(e.Value),
				Timestamp: e.Timestamp, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(e.Header)}}})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			fail("franz produce %s: %v", codec, err)
		}
		emit(map[string]any{"client": "franz", "check": "produced", "codec": codec, "partition": p,
			"first_offset": rs[0].Offset, "last_offset": rs[len(rs)-1].Offset})
		cl.Close()
	}

	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range codecs {
		offsets[topic][int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(franzOpts(bootstrap, kgo.ConsumePartitions(offsets))...)
	if err != nil {
		fail("franz consumer: %v", err)
	}
	matched, mismatches := 0, 0
	for matched+mismatches < records*len(codecs) && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) { fail("franz fetch %s/%d: %v", t, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			e := expected(int(r.Partition), int(r.Offset))
			if string(r.Key) == e.Key && string(r.Value) == e.Value && r.Timestamp.Equal(e.Timestamp) &&
				len(r.Headers) == 1 && r.Headers[0].Key == "h" && string(r.Headers[0].Value) == e.Header {
				matched++
			} else {
				mismatches++
			}
		})
	}
	cl.Close()
	emit(map[string]any{"client": "franz", "check": "read_back", "matched": matched, "mismatches": mismatches})
	franzGroup(ctx, bootstrap, groupTopic)
}

// franzGroup: two members of one group (franz-go's default balancer, cooperative-sticky)
// read the topic between them and commit.
func franzGroup(ctx context.Context, bootstrap, topic string) {
	group := topic + "-franz"
	var mu sync.Mutex
	seen := map[string]int{}
	assigned := make([]map[int32]bool, 2)
	var members []*kgo.Client
	for m := 0; m < 2; m++ {
		m := m
		assigned[m] = map[int32]bool{}
		cl, err := kgo.NewClient(franzOpts(bootstrap, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range a[topic] {
					assigned[m][p] = true
				}
			}),
			kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, r map[string][]int32) {
				_ = c.CommitUncommittedOffsets(ctx)
				mu.Lock()
				defer mu.Unlock()
				for _, p := range r[topic] {
					delete(assigned[m], p)
				}
			}))...)
		if err != nil {
			fail("franz group member: %v", err)
		}
		members = append(members, cl)
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == groupRecords && len(assigned[0]) > 0 && len(assigned[1]) > 0
	}
	end := time.Now().Add(deadline)
	for !done() {
		if time.Now().After(end) {
			fail("franz group: read %d of %d, assignments %v", len(seen), groupRecords, assigned)
		}
		for _, cl := range members {
			pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			fetches := cl.PollFetches(pctx)
			cancel()
			fetches.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				seen[string(r.Value)]++
				mu.Unlock()
			})
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				fail("franz commit: %v", err)
			}
		}
	}
	duplicates := 0
	for _, n := range seen {
		duplicates += n - 1
	}
	sizes := []int{len(assigned[0]), len(assigned[1])}
	for _, cl := range members {
		cl.Close()
	}
	emit(map[string]any{"client": "franz", "check": "group", "group": group, "read": len(seen),
		"duplicates": duplicates, "assigned": sizes})
}

// franzOpts: the seed broker, TLS and SASL from the environment (security.go), then opts.
func franzOpts(bootstrap string, opts ...kgo.Opt) []kgo.Opt {
	out := []kgo.Opt{kgo.SeedBrokers(bootstrap)}
	if tlsCfg := tlsFromEnv(); tlsCfg != nil {
		out = append(out, kgo.DialTLSConfig(tlsCfg))
	}
	user, pass := os.Getenv("KBROKER_SASL_USER"), os.Getenv("KBROKER_SASL_PASSWORD")
	switch os.Getenv("KBROKER_SASL_MECHANISM") {
	case "":
	case "PLAIN":
		out = append(out, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "SCRAM-SHA-256":
		out = append(out, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		out = append(out, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		fail("unknown KBROKER_SASL_MECHANISM %q", os.Getenv("KBROKER_SASL_MECHANISM"))
	}
	return append(out, opts...)
}
