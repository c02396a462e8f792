package router_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/router"
)

func headerMap(rec *kgo.Record) map[string]string {
	m := make(map[string]string, len(rec.Headers))
	for _, h := range rec.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

func TestRefusedRecord(t *testing.T) {
	orig := &kgo.Record{Topic: "orders", Key: []byte("k1"), Value: []byte(`{"big":true}`),
		Headers: []kgo.RecordHeader{{Key: router.HeaderEventID, Value: []byte("e1")}}}
	from := router.Origin{Table: "public.outbox", LSN: 0x16B3748, XID: 42}
	tests := []struct {
		name      string
		dropValue bool
		wantValue string
	}{
		{name: "size refusal drops the value", dropValue: true, wantValue: ""},
		{name: "other refusal keeps the value", dropValue: false, wantValue: `{"big":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dl := router.RefusedRecord(orig, from, "dlq", "too large", tt.dropValue)
			if dl.Topic != "dlq" || string(dl.Key) != "k1" || string(dl.Value) != tt.wantValue {
				t.Fatalf("record = topic %q key %q value %q", dl.Topic, dl.Key, dl.Value)
			}
			want := map[string]string{
				router.HeaderEventID:       "e1",
				router.HeaderError:         "too large",
				router.HeaderTable:         "public.outbox",
				router.HeaderLSN:           "0/16B3748",
				router.HeaderXID:           "42",
				router.HeaderOriginalTopic: "orders",
			}
			got := headerMap(dl)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("header %s = %q, want %q", k, got[k], v)
				}
			}
			if len(orig.Headers) != 1 || orig.Topic != "orders" {
				t.Errorf("the original record was modified: %+v", orig)
			}
		})
	}
}

func TestMessageDeadLetter(t *testing.T) {
	dl := router.MessageDeadLetter("dlq", []byte("not json"), "outbox", 0x100, 0, time.Time{}, "not transactional")
	if dl.Topic != "dlq" || string(dl.Value) != "not json" || dl.Key != nil {
		t.Fatalf("record = %+v", dl)
	}
	got := headerMap(dl)
	want := map[string]string{
		router.HeaderError: "not transactional",
		router.HeaderTable: "pg_logical_emit_message.outbox",
		router.HeaderLSN:   "0/100",
		router.HeaderXID:   "0",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
}
