// Command goclients drives a Go Kafka client against a broker, one client a run:
//
//	goclients franz|sarama BOOTSTRAP TOPIC GROUP_TOPIC
//
// TOPIC has one partition per codec (none, gzip, snappy, lz4, zstd): a producer per codec
// writes RECORDS keyed records with headers to its partition, and everything is read back
// and compared. GROUP_TOPIC (4 partitions, GROUP_RECORDS records already in it) is read by
// a consumer group of two members in this process, which commit what they read. Each step
// prints one JSON line; a failure exits non-zero with the reason on stderr.
//
//	goclients franz-txn BOOTSTRAP TOPIC TRANSACTIONAL_ID
//
// runs franz-go's transactional producer through a commit, an abort of a transaction
// whose produce failed, and another commit (txn.go).
//
//	goclients franz-sr BOOTSTRAP REGISTRY_URL TOPIC
//
// runs franz-go's schema registry client (pkg/sr) against a registry, and records framed
// by its Serde through the broker (sr.go).
//
//	goclients franz-share BOOTSTRAP TOPIC GROUP CLIENT_ID
//
// runs a franz-go share consumer (KIP-932) in share group GROUP until SIGTERM (share.go);
// franz-share-ack, with the same arguments, one that acknowledges and reports every record
// (share_ack.go).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

var codecs = []string{"none", "gzip", "snappy", "lz4", "zstd"}

const (
	records      = 200
	groupRecords = 40
	deadline     = 60 * time.Second
)

// record is what the producers write and the read-back expects.
type record struct {
	Key, Value, Header string
	Timestamp          time.Time
}

func expected(partition, i int) record {
	return record{
		Key:       fmt.Sprintf("key-%d-%d", partition, i),
		Value:     fmt.Sprintf("value-%d-%d-%s", partition, i, "payload payload payload"),
		Header:    fmt.Sprintf("%d", i),
		Timestamp: time.UnixMilli(1_795_000_000_000 + int64(i)),
	}
}

func emit(facts map[string]any) {
	out, _ := json.Marshal(facts)
	fmt.Println(string(out))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) == 5 && os.Args[1] == "franz-sr" {
		franzSR(os.Args[2], os.Args[3], os.Args[4]) // sr.go
		return
	}
	if len(os.Args) == 6 && os.Args[1] == "franz-share-ack" {
		franzShareAck(os.Args[2], os.Args[3], os.Args[4], os.Args[5]) // share_ack.go
		return
	}
	if len(os.Args) == 6 && os.Args[1] == "franz-share" {
		franzShare(os.Args[2], os.Args[3], os.Args[4], os.Args[5]) // share.go
		return
	}
	if len(os.Args) == 5 && os.Args[1] == "franz-txn" {
		franzTxn(os.Args[2], os.Args[3], os.Args[4]) // txn.go
		return
	}
	if len(os.Args) != 5 {
		fail("usage: goclients franz|sarama BOOTSTRAP TOPIC GROUP_TOPIC, or goclients franz-txn BOOTSTRAP TOPIC TRANSACTIONAL_ID")
	}
	bootstrap, topic, groupTopic := os.Args[2], os.Args[3], os.Args[4]
	switch os.Args[1] {
	case "franz":
		franz(bootstrap, topic, groupTopic)
	case "sarama":
		saramaChecks(bootstrap, topic, groupTopic)
	default:
		fail("unknown client %q", os.Args[1])
	}
}
