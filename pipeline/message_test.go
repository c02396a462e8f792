package pipeline

import (
	"testing"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/router"
)

func TestMessageInsert(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    map[string]string // column -> text; "<null>" for NULL
		wantErr bool
	}{
		{name: "classic fields", content: `{"id":"e1","aggregate_type":"order","aggregate_id":"o1","payload":{"a": 1},"headers":{"t":"x"}}`,
			want: map[string]string{"id": "e1", "aggregate_type": "order", "aggregate_id": "o1", "payload": `{"a": 1}`, "headers": `{"t":"x"}`}},
		{name: "null and numbers", content: `{"aggregate_id":null,"n":12.5,"ok":true}`,
			want: map[string]string{"aggregate_id": "<null>", "n": "12.5", "ok": "true"}},
		{name: "escaped string", content: `{"aggregate_id":"a\"b\u00e9"}`, want: map[string]string{"aggregate_id": "a\"bé"}},
		{name: "not an object", content: `["x"]`, wantErr: true},
		{name: "truncated", content: `{"id":"e1"`, wantErr: true},
		{name: "trailing data", content: `{"id":"e1"} {}`, wantErr: true},
		{name: "empty", content: ``, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mr messageRelations
			ins, err := mr.messageInsert(&decoder.Message{Prefix: "outbox", Transactional: true, Content: []byte(tt.content)})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("accepted %q", tt.content)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ins.Values) != len(tt.want) {
				t.Fatalf("%d columns, want %d", len(ins.Values), len(tt.want))
			}
			for i, c := range ins.Relation.Columns {
				v := ins.Values[i]
				got := string(v.Data)
				if v.Kind == decoder.KindNull {
					got = "<null>"
				}
				if got != tt.want[c.Name] {
					t.Errorf("column %s = %q, want %q", c.Name, got, tt.want[c.Name])
				}
			}
		})
	}
}

// TestMessageRelationsAreReused: the router resolves columns once per
// relation, so messages with the same keys must share one.
func TestMessageRelationsAreReused(t *testing.T) {
	var mr messageRelations
	a, _ := mr.messageInsert(&decoder.Message{Prefix: "p", Content: []byte(`{"aggregate_id":"1","payload":{}}`)})
	b, _ := mr.messageInsert(&decoder.Message{Prefix: "p", Content: []byte(`{"aggregate_id":"2","payload":{"x":1}}`)})
	c, _ := mr.messageInsert(&decoder.Message{Prefix: "p", Content: []byte(`{"payload":{},"aggregate_id":"3"}`)})
	if a.Relation != b.Relation {
		t.Error("same keys got different relations")
	}
	if a.Relation == c.Relation || a.Relation.ID == c.Relation.ID {
		t.Error("different key order shared a relation")
	}
}

// FuzzMessageInsert: message content comes from the WAL, written by any
// client; it must never panic, and what it accepts must route or fail
// cleanly.
func FuzzMessageInsert(f *testing.F) {
	f.Add([]byte(`{"id":"e1","aggregate_type":"order","aggregate_id":"o1","payload":{"a":1},"headers":{"t":"x"}}`))
	f.Add([]byte(`{"aggregate_id":null}`))
	f.Add([]byte(`{`))
	rt, err := router.New(router.Config{InvalidRows: router.PolicyDeadLetter, DeadLetterTopic: "dlq"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		var mr messageRelations
		ins, err := mr.messageInsert(&decoder.Message{Prefix: "outbox", Transactional: true, Content: content})
		if err != nil {
			return
		}
		routed, err := rt.Route(ins)
		if err == nil && routed.Record == nil {
			t.Fatal("routed without a record")
		}
	})
}
