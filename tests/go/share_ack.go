package main

// goclients franz-share-ack BOOTSTRAP TOPIC GROUP CLIENT_ID
//
// A franz-go share consumer (kgo.ShareGroup) in share group GROUP on TOPIC that
// acknowledges every record it receives — AckRelease for a record whose value starts with
// "rel-" on its first delivery, AckAccept otherwise — until SIGTERM or SIGINT. It prints
// {"step":"record","offset":O,"delivery":N} per record received and
// {"step":"committed","accepted":[...]} once the acknowledgements of a poll were sent
// (FlushAcks), {"step":"error",...} for a fetch error.

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"
)

func franzShareAck(bootstrap, topic, group, clientID string) {
	cl, err := kgo.NewClient(franzOpts(bootstrap, kgo.ConsumeTopics(topic), kgo.ShareGroup(group), kgo.ClientID(clientID))...)
	if err != nil {
		fail("share client: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	emit(map[string]any{"step": "started", "group": group})
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		for _, e := range fetches.Errors() {
			if e.Err != nil && ctx.Err() == nil {
				emit(map[string]any{"step": "error", "error": e.Err.Error()})
			}
		}
		accepted := []int64{}
		for _, r := range fetches.Records() {
			n := r.DeliveryCount()
			emit(map[string]any{"step": "record", "offset": r.Offset, "delivery": n, "value": string(r.Value)})
			if strings.HasPrefix(string(r.Value), "rel-") && n == 1 {
				cl.MarkAcks(kgo.AckRelease, r)
			} else {
				cl.MarkAcks(kgo.AckAccept, r)
				accepted = append(accepted, r.Offset)
			}
		}
		if len(accepted) > 0 {
			if err := cl.FlushAcks(ctx); err != nil {
				emit(map[string]any{"step": "commit-failed", "error": err.Error()})
			} else {
				emit(map[string]any{"step": "committed", "accepted": accepted})
			}
		}
	}
	cl.Close()
	emit(map[string]any{"step": "closed"})
	os.Exit(0)
}
