package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// txnLogger counts the franz-go log lines that show which way EndTransaction went, and
// passes its warnings and errors on to stderr.
type txnLogger struct {
	concurrent atomic.Int64 // EndTxn answered CONCURRENT_TRANSACTIONS, retried
	emptyAbort atomic.Int64 // a transaction whose produces all failed, ended by an abort
}

func (l *txnLogger) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *txnLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch {
	case strings.HasPrefix(msg, "EndTxn failed with CONCURRENT_TRANSACTIONS"):
		l.concurrent.Add(1)
	case strings.HasPrefix(msg, "no produce succeeded in this transaction"):
		l.emptyAbort.Add(1)
	}
	if level <= kgo.LogLevelWarn || os.Getenv("GOCLIENTS_DEBUG") != "" {
		var b strings.Builder
		b.WriteString(level.String() + " " + msg)
		for i := 0; i+1 < len(keyvals); i += 2 {
			fmt.Fprintf(&b, " %v=%v", keyvals[i], keyvals[i+1])
		}
		fmt.Fprintln(os.Stderr, b.String())
	}
}

// franzTxn: goclients franz-txn BOOTSTRAP TOPIC TRANSACTIONAL_ID
//
// A transactional franz-go producer (transaction.version 2 when the cluster finalizes it)
// commits txnRecords records to partition 0 of TOPIC (BOOTSTRAP may list several
// brokers), after a line on stdin (the test holds the commit's markers back meanwhile),
// then at once runs a transaction whose only produce fails (a partition the topic does
// not have): franz-go ends such a transaction with an EndTxn abort at the epoch the
// commit answered. Then one more transaction commits. Each step prints one JSON line
// ("step"); the abort's line says whether it failed and how often EndTxn was told
// CONCURRENT_TRANSACTIONS. GOCLIENTS_DEBUG=1 in the environment puts all of franz-go's
// log on stderr (else its warnings and errors).
func franzTxn(bootstrap, topic, txnID string) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	logger := &txnLogger{}
	// franz-go asks ApiVersions v5 first; kbroker (v0-4) answers UNSUPPORTED_VERSION with
	// ApiVersions' own range (KIP-511) and franz-go asks again at v4, whose answer carries
	// the finalized transaction.version: its first transaction is at version 2
	cl, err := kgo.NewClient(franzOpts(bootstrap, kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(60*time.Second),
		kgo.WithLogger(logger))...)
	if err != nil {
		fail("franz transactional client: %v", err)
	}
	defer cl.Close()
	id := func() (int64, int16) {
		pid, epoch, err := cl.ProducerID(ctx)
		if err != nil {
			fail("producer id: %v", err)
		}
		return pid, epoch
	}
	commit := func(name string) {
		if err := cl.BeginTransaction(); err != nil {
			fail("begin %s: %v", name, err)
		}
		var rs []*kgo.Record
		for i := 0; i < txnRecords; i++ {
			rs = append(rs, &kgo.Record{Partition: 0, Value: []byte(name + "-" + strconv.Itoa(i))})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			fail("produce %s: %v", name, err)
		}
	}
	end := func(step string, extra map[string]any) {
		t0 := time.Now()
		err := cl.EndTransaction(ctx, kgo.TryCommit)
		pid, epoch, idErr := cl.ProducerID(ctx)
		facts := map[string]any{"step": step, "ms": time.Since(t0).Milliseconds(), "err": errText(err),
			"producer_id": pid, "epoch": epoch, "id_err": errText(idErr),
			"concurrent_retries": logger.concurrent.Load(), "empty_aborts": logger.emptyAbort.Load()}
		for k, v := range extra {
			facts[k] = v
		}
		emit(facts)
		if err != nil || idErr != nil {
			os.Exit(1)
		}
	}

	pid, epoch := id()
	emit(map[string]any{"step": "initialized", "producer_id": pid, "epoch": epoch})
	commit("first")
	emit(map[string]any{"step": "produced"})
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail("waiting for the go-ahead on stdin: %v", err)
	}
	end("committed", nil)

	// a transaction none of whose produces succeeds
	if err := cl.BeginTransaction(); err != nil {
		fail("begin the failing transaction: %v", err)
	}
	produceErr := cl.ProduceSync(ctx, &kgo.Record{Partition: 99, Value: []byte("nowhere")}).FirstErr()
	if produceErr == nil {
		fail("a record for partition 99 of a 1-partition topic was produced")
	}
	logger.concurrent.Store(0)
	end("empty_abort", map[string]any{"produce_err": produceErr.Error()})

	commit("third")
	end("committed_after", nil)
}

const txnRecords = 10

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
