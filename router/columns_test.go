package router

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckColumns(t *testing.T) {
	classic := []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}
	tests := []struct {
		name    string
		cfg     Config
		columns []string
		wantErr []string // substrings; nil means no error
	}{
		{name: "classic table", cfg: Config{}, columns: classic},
		{name: "optional columns may be absent", cfg: Config{}, columns: []string{"aggregate_type", "aggregate_id", "payload"}},
		{name: "unknown placeholder", cfg: Config{TopicTemplate: "events.{tenant}.{aggregate_type}"}, columns: classic,
			wantErr: []string{`{tenant}`, `"tenant"`, "public.outbox"}},
		{name: "missing aggregate id", cfg: Config{Columns: Columns{AggregateID: "aggregateid"}}, columns: classic,
			wantErr: []string{"--column-aggregate-id", `"aggregateid"`}},
		{name: "missing topic column", cfg: Config{Columns: Columns{Topic: "topic"}}, columns: classic,
			wantErr: []string{"--column-topic"}},
		{name: "json placeholder checks its column", cfg: Config{TopicTemplate: "x.{metadata->>service}"}, columns: classic,
			wantErr: []string{`"metadata"`}},
		{name: "json placeholder on a present column", cfg: Config{TopicTemplate: "x.{headers->>service}"}, columns: classic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = r.CheckColumns("public.outbox", tt.columns)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v, want ErrInvalidConfig", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
