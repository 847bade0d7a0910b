package main

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// srOrder is what the franz-sr check frames with franz-go's sr.Serde (JSON Schema).
type srOrder struct {
	ID   int    `json:"id"`
	Item string `json:"item"`
}

const srOrderSchema = `{"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
 "required": ["id"], "additionalProperties": false}`

// franzSR: franz-go's schema registry client (pkg/sr) against the registry at registryURL;
// records framed by its Serde go through the broker at bootstrap and are read back.
//
//	goclients franz-sr BOOTSTRAP REGISTRY_URL TOPIC
func franzSR(bootstrap, registryURL, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cl, err := sr.NewClient(sr.URLs(registryURL))
	if err != nil {
		fail("sr client: %v", err)
	}
	types, err := cl.SupportedTypes(ctx)
	if err != nil {
		fail("supported types: %v", err)
	}
	subject := topic + "-value"
	ss, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: srOrderSchema, Type: sr.TypeJSON})
	if err != nil {
		fail("create schema: %v", err)
	}
	again, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: srOrderSchema, Type: sr.TypeJSON})
	if err != nil {
		fail("create schema again: %v", err)
	}
	looked, err := cl.LookupSchema(ctx, subject, sr.Schema{Schema: srOrderSchema, Type: sr.TypeJSON})
	if err != nil {
		fail("lookup: %v", err)
	}
	emit(map[string]any{"step": "register", "types": types, "id": ss.ID, "version": ss.Version,
		"again": again.ID, "looked_up": looked.ID, "subject": ss.Subject})

	var serde sr.Serde
	serde.Register(ss.ID, srOrder{}, sr.EncodeFn(json.Marshal), sr.DecodeFn(json.Unmarshal))
	kcl, err := kgo.NewClient(franzOpts(bootstrap, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		fail("franz client: %v", err)
	}
	defer kcl.Close()
	var rs []*kgo.Record
	for i := 0; i < 20; i++ {
		b, err := serde.Encode(srOrder{ID: i, Item: "thing"})
		if err != nil {
			fail("encode: %v", err)
		}
		rs = append(rs, &kgo.Record{Topic: topic, Value: b})
	}
	if err := kcl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		fail("produce: %v", err)
	}
	var got []srOrder
	ids := map[int]bool{}
	for len(got) < len(rs) {
		fetches := kcl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			fail("consume: %v after %d records", err, len(got))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			id, _, err := serde.DecodeID(r.Value)
			if err != nil {
				fail("decode id: %v", err)
			}
			ids[id] = true
			var o srOrder
			if err := serde.Decode(r.Value, &o); err != nil {
				fail("decode: %v", err)
			}
			got = append(got, o)
		})
	}
	sort.Slice(got, func(i, j int) bool { return got[i].ID < got[j].ID })
	okOrder := true
	for i, o := range got {
		okOrder = okOrder && o.ID == i && o.Item == "thing"
	}
	idList := []int{}
	for id := range ids {
		idList = append(idList, id)
	}
	emit(map[string]any{"step": "serde", "records": len(got), "round_trip": okOrder, "ids": idList})

	bad := sr.Schema{Schema: `{"type": "object", "properties": {"id": {"type": "string"}}}`, Type: sr.TypeJSON}
	check, err := cl.CheckCompatibility(ctx, subject, -1, bad)
	if err != nil {
		fail("check compatibility: %v", err)
	}
	text, err := cl.SchemaTextByID(ctx, ss.ID)
	if err != nil {
		fail("schema text: %v", err)
	}
	versions, err := cl.SubjectVersions(ctx, subject)
	if err != nil {
		fail("versions: %v", err)
	}
	compat := cl.Compatibility(ctx)
	_, missingErr := cl.SchemaByID(ctx, 987654)
	var re *sr.ResponseError
	code := 0
	if errors.As(missingErr, &re) {
		code = re.ErrorCode
	}
	deleted, err := cl.DeleteSubject(ctx, subject, sr.SoftDelete)
	if err != nil {
		fail("delete: %v", err)
	}
	emit(map[string]any{"step": "api", "compatible": check.Is, "text_ok": len(text) > 0, "versions": versions,
		"global_compatibility": compat[0].Level.String(), "missing_code": code, "deleted": deleted})
	_ = time.Second
}
