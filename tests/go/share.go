package main

// goclients franz-share BOOTSTRAP TOPIC GROUP CLIENT_ID
//
// A franz-go share consumer (kgo.ShareGroup) in share group GROUP subscribed to TOPIC:
// it joins, heartbeats and polls until it is told to stop (SIGTERM or SIGINT: it closes
// the client, which leaves the group with epoch -1) or killed. It prints {"step":"started"}
// once its client is up and one {"step":"poll",...} line per poll that returns records or
// errors (the test reads the broker's side of the membership, not these).

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"
)

func franzShare(bootstrap, topic, group, clientID string) {
	// BOOTSTRAP may name several brokers (HOST:PORT,HOST:PORT...): each is a seed
	opts := franzOpts(bootstrap, kgo.ConsumeTopics(topic), kgo.ShareGroup(group), kgo.ClientID(clientID))
	opts = append(opts, kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail("share client: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	emit(map[string]any{"step": "started", "group": group})
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		errs := []string{}
		for _, e := range fetches.Errors() {
			if e.Err != nil && ctx.Err() == nil {
				errs = append(errs, e.Err.Error())
			}
		}
		if n := len(fetches.Records()); n > 0 || len(errs) > 0 {
			emit(map[string]any{"step": "poll", "records": n, "errors": errs})
		}
	}
	cl.Close()
	emit(map[string]any{"step": "closed"})
	os.Exit(0)
}
