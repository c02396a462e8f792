package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/router"
)

// TestOwnerDrift covers the three ways config's own copies of the router's
// checks had drifted from the router (issue 7, "One owner for each
// decision"). Each case failed on the old code as its comment says; now the
// router decides and config reports its verdict under the option.
func TestOwnerDrift(t *testing.T) {
	debeziumTable := []string{"id", "aggregatetype", "aggregateid", "type", "payload"}
	tests := []struct {
		name    string
		args    []string
		file    string
		wantErr []string // nil: Load succeeds
		table   []string // when set, the router built from the Config must accept this table
	}{
		{
			// a) The ->> form the README documents was refused by config's
			// own template parser ("'-' is not allowed") though the router
			// accepts it.
			name: "a: JSON key placeholder",
			args: []string{"--topic", "events.{metadata->>type}"},
		},
		{
			// b) config accepted a dead-letter topic with the default fail
			// policy; the router refused it at start: exit 1, naming YAML
			// keys instead of the flag.
			name:    "b: dead-letter topic with the fail policy",
			args:    []string{"--dead-letter-topic", "dlq"},
			wantErr: []string{`invalid value "dlq" for --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC): set, but --invalid-rows is "fail"`, `set --invalid-rows to "dead-letter" or remove it`},
		},
		{
			name:    "b: from the file, the YAML key is named too",
			file:    "dead_letter_topic: dlq\n",
			wantErr: []string{`walbox.yaml:1: dead_letter_topic: invalid value "dlq" for --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC)`},
		},
		{
			// c) With Debezium's table and the README's mapping, the default
			// template named the physical column aggregate_type, which the
			// table lacks: walbox exited 1 at start.
			name:  "c: Debezium mapping with the default template",
			args:  []string{"--column-aggregate-type", "aggregatetype", "--column-aggregate-id", "aggregateid", "--column-event-type", "type"},
			table: debeziumTable,
		},
		{
			name:  "c: the same mapping from the README's YAML",
			file:  "columns: {id: id, aggregate_type: aggregatetype, aggregate_id: aggregateid, event_type: type, payload: payload}\n",
			table: debeziumTable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, nil, tt.file)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Load succeeded, want %q", tt.wantErr)
				}
				var oe *OptionError
				if !errors.Is(err, ErrInvalid) || !errors.As(err, &oe) {
					t.Errorf("error %v is not an *OptionError wrapping ErrInvalid", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not contain %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			rt, err := router.New(c.RouterConfig())
			if err != nil {
				t.Fatalf("router.New on a validated Config: %v", err)
			}
			if tt.table != nil {
				if err := rt.CheckColumns("public.outbox", tt.table); err != nil {
					t.Errorf("CheckColumns: %v", err)
				}
			}
		})
	}
}

// TestOwnerErrorMapping: every problem an owner package reports lands on
// the option that sets the field, once, with all problems reported at once.
func TestOwnerErrorMapping(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // flags, in report order
	}{
		{name: "router fields", mutate: func(c *Config) {
			c.Topic = "x.{"
			c.Columns.Payload = "a->>b"
			c.Columns.ID = `"id"`
			c.InvalidRows = "skip"
		}, want: []string{"invalid-rows", "column-id", "column-payload", "topic"}},
		{name: "slotctl fields, probed one by one", mutate: func(c *Config) {
			c.Table = "a.b.c"
			c.Slot = "Bad"
		}, want: []string{"table", "slot"}},
		{name: "pipeline field", mutate: func(c *Config) { c.DedupWindow = -5 }, want: []string{"dedup-window"}},
		{name: "slotctl and pipeline both reject an empty slot, reported once", mutate: func(c *Config) { c.Slot = "" }, want: []string{"slot"}},
		{name: "own check first, owners not repeated", mutate: func(c *Config) { c.PGDSN = "" }, want: []string{"pg-dsn"}},
		{name: "every package at once", mutate: func(c *Config) {
			c.Topic = "x.{"
			c.Slot = "Bad"
			c.DedupWindow = -1
			c.LogFormat = "xml"
		}, want: []string{"log-format", "topic", "slot", "dedup-window"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			var got []string
			for _, e := range splitJoined(c.Validate()) {
				var oe *OptionError
				if !errors.As(e, &oe) {
					t.Fatalf("%v is not an *OptionError", e)
				}
				got = append(got, oe.Flag)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("problems on %v, want %v:\n%v", got, tt.want, c.Validate())
			}
		})
	}
}

// TestEveryRouterFieldHasAnOption: a router error can always be mapped.
func TestEveryRouterFieldHasAnOption(t *testing.T) {
	for _, f := range []router.Field{
		router.FieldColumnsID, router.FieldColumnsAggregateType, router.FieldColumnsAggregateID,
		router.FieldColumnsEventType, router.FieldColumnsPayload, router.FieldColumnsHeaders,
		router.FieldColumnsTopic, router.FieldTopicTemplate, router.FieldInvalidRows, router.FieldDeadLetterTopic,
	} {
		if optionByRouterField(f) == nil {
			t.Errorf("no option sets router field %s", f)
		}
	}
}

// TestDefaultsComeFromOwners: the defaults shown by Usage are the owner
// packages' own, not restated numbers.
func TestDefaultsComeFromOwners(t *testing.T) {
	d := Defaults()
	if d.RouterConfig().Validate() != nil || d.Topic != router.DefaultTopicTemplate || d.Columns != router.DefaultColumns() {
		t.Errorf("routing defaults differ from the router's: %+v", d)
	}
	p := d.PipelineConfig()
	if p.StatusInterval == 0 || p.MaxInflightBytes == 0 || p.BackoffMax == 0 {
		t.Errorf("pipeline defaults missing: %+v", p)
	}
	if s := d.SlotctlConfig(); s != s.WithDefaults() {
		t.Errorf("slotctl names %+v differ from slotctl's defaults %+v", s, s.WithDefaults())
	}
}

// TestPipelineRoutesOnlyTheTable: walbox run hands the relay the outbox
// table, so inserts into other tables of the publication are not routed
// (issue 7, item 8); an empty --table means the default table.
func TestPipelineRoutesOnlyTheTable(t *testing.T) {
	for _, tt := range []struct{ table, want string }{
		{"app.events", "app.events"},
		{"", "public.outbox"},
	} {
		c := Defaults()
		c.Table = tt.table
		if got := c.PipelineConfig().Tables; len(got) != 1 || got[0] != tt.want {
			t.Errorf("Table %q: PipelineConfig().Tables = %q, want [%q]", tt.table, got, tt.want)
		}
	}
}

// TestHeartbeatIntervalZeroDecodesFromAStandby: --heartbeat-interval=0 is
// how an operator says walbox decodes from a standby on purpose (no
// heartbeat can be written there); otherwise a session that reaches a
// standby is retried until it reaches the primary (issue 26).
func TestHeartbeatIntervalZeroDecodesFromAStandby(t *testing.T) {
	d := Defaults()
	if p := d.PipelineConfig(); p.DecodeFromStandby || !p.Heartbeats {
		t.Errorf("defaults: DecodeFromStandby %v, Heartbeats %v; want false, true", p.DecodeFromStandby, p.Heartbeats)
	}
	d.HeartbeatInterval = 0
	if p := d.PipelineConfig(); !p.DecodeFromStandby || p.Heartbeats {
		t.Errorf("--heartbeat-interval=0: DecodeFromStandby %v, Heartbeats %v; want true, false", p.DecodeFromStandby, p.Heartbeats)
	}
}
