package inbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
)

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     inbox.Config
		wantErr string // substring; empty = valid
	}{
		{name: "defaults", cfg: inbox.Config{Consumer: "billing"}},
		{name: "bare table", cfg: inbox.Config{Consumer: "billing", Table: "inbox"}},
		{name: "schema table", cfg: inbox.Config{Consumer: "billing", Table: "app.Inbox"}},
		{name: "no consumer", cfg: inbox.Config{}, wantErr: "Consumer is empty"},
		{name: "blank consumer", cfg: inbox.Config{Consumer: "  "}, wantErr: "Consumer is empty"},
		{name: "control in consumer", cfg: inbox.Config{Consumer: "a\nb"}, wantErr: "control character"},
		{name: "consumer not UTF-8", cfg: inbox.Config{Consumer: "bill\xffing"}, wantErr: "not valid UTF-8"},
		{name: "three parts", cfg: inbox.Config{Consumer: "c", Table: "a.b.c"}, wantErr: "expected schema.table"},
		{name: "quoted", cfg: inbox.Config{Consumer: "c", Table: `"inbox"`}, wantErr: "without quotes"},
		{name: "empty schema", cfg: inbox.Config{Consumer: "c", Table: ".inbox"}, wantErr: "it is empty"},
		{name: "too long for the index", cfg: inbox.Config{Consumer: "c", Table: strings.Repeat("x", 48)}, wantErr: "at most 47 fit"},
		{name: "longest", cfg: inbox.Config{Consumer: "c", Table: strings.Repeat("x", 47)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ib, err := inbox.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if ib.Config().Header != inbox.DefaultHeader {
					t.Errorf("Header = %q, want the default", ib.Config().Header)
				}
				return
			}
			if !errors.Is(err, inbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: %v, want ErrInvalidConfig containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestEventID(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	tests := []struct {
		name    string
		header  string
		headers []kgo.RecordHeader
		want    string
		wantErr string
	}{
		{name: "event_id", headers: h("event_type", "X", "event_id", "e-1"), want: "e-1"},
		{name: "debezium id", header: "id", headers: h("id", "6f1c", "event_id", "other"), want: "6f1c"},
		{name: "repeated, same value", headers: h("event_id", "e-1", "event_id", "e-1"), want: "e-1"},
		{name: "missing", headers: h("id", "6f1c"), wantErr: `topic=t partition=2 offset=41 has no "event_id" header`},
		{name: "missing custom", header: "id", headers: h("event_id", "x"), wantErr: `has no "id" header`},
		{name: "empty", headers: h("event_id", ""), wantErr: `has an empty "event_id" header`},
		{name: "repeated, different", headers: h("event_id", "e-1", "event_id", "e-2"), wantErr: `two "event_id" headers`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ib, err := inbox.New(inbox.Config{Consumer: "c", Header: tt.header})
			if err != nil {
				t.Fatal(err)
			}
			got, err := ib.EventID(&kgo.Record{Topic: "t", Partition: 2, Offset: 41, Headers: tt.headers})
			if tt.wantErr != "" {
				if !errors.Is(err, inbox.ErrMissingEventID) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("EventID: %v, want ErrMissingEventID containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("EventID = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
