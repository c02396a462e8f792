package router

import (
	"errors"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means valid
	}{
		{name: "zero value", cfg: Config{}},
		{name: "explicit defaults", cfg: Config{Columns: DefaultColumns(), TopicTemplate: DefaultTopicTemplate, InvalidRows: PolicyFail}},
		{name: "dead letter with topic", cfg: Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "outbox.dlq"}},
		{name: "topic column without template", cfg: Config{Columns: Columns{Topic: "topic"}}},
		{name: "constant template", cfg: Config{TopicTemplate: "events"}},
		{name: "json key placeholder", cfg: Config{TopicTemplate: "wm.{metadata->>Source-Service}"}},
		{name: "json key columns", cfg: Config{Columns: Columns{AggregateID: "metadata->>Aggregate-Id", EventType: "metadata->>Event-Type"}}},

		{name: "unknown policy", cfg: Config{InvalidRows: "skip"}, wantErr: `router: InvalidRows "skip": unknown policy; expected "fail" or "dead-letter"`},
		{name: "dead letter without topic", cfg: Config{InvalidRows: PolicyDeadLetter}, wantErr: `router: DeadLetterTopic: required with InvalidRows "dead-letter"`},
		{name: "dead letter topic with fail policy", cfg: Config{DeadLetterTopic: "dlq"}, wantErr: `router: DeadLetterTopic "dlq": set, but InvalidRows is "fail"`},
		{name: "dead letter topic invalid", cfg: Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dead letters"}, wantErr: `DeadLetterTopic "dead letters": topic name contains " "`},
		{name: "dead letter topic ..", cfg: Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: ".."}, wantErr: `cannot be "." or ".."`},

		{name: "unclosed brace", cfg: Config{TopicTemplate: "orders.{aggregate_type"}, wantErr: "unclosed { at offset 7"},
		{name: "nested brace", cfg: Config{TopicTemplate: "a.{b{c}}"}, wantErr: "unclosed { at offset 2"},
		{name: "empty placeholder", cfg: Config{TopicTemplate: "a.{}"}, wantErr: "empty placeholder {} at offset 2"},
		{name: "stray closing brace", cfg: Config{TopicTemplate: "a}.{b}"}, wantErr: "unmatched } at offset 1"},
		{name: "closing brace after placeholder", cfg: Config{TopicTemplate: "{b}}"}, wantErr: "unmatched } at offset 3"},
		{name: "literal slash", cfg: Config{TopicTemplate: "orders/{aggregate_type}"}, wantErr: `literal character "/" at offset 6`},
		{name: "literal space", cfg: Config{TopicTemplate: "a b.{x}"}, wantErr: `literal character " " at offset 1`},
		{name: "constant template ..", cfg: Config{TopicTemplate: ".."}, wantErr: `cannot be "." or ".."`},
		{name: "literal over the limit", cfg: Config{TopicTemplate: strings.Repeat("a", 250) + "{x}"}, wantErr: "over Kafka's 249-character topic limit"},
		{name: "placeholder with empty json key", cfg: Config{TopicTemplate: "a.{meta->>}"}, wantErr: "empty key after ->>"},
		{name: "placeholder with empty column", cfg: Config{TopicTemplate: "a.{->>k}"}, wantErr: "empty column name"},
		{name: "bad template checked even with a topic column", cfg: Config{Columns: Columns{Topic: "topic"}, TopicTemplate: "{x"}, wantErr: "unclosed {"},

		{name: "payload as json key", cfg: Config{Columns: Columns{Payload: "data->>body"}}, wantErr: `Columns.Payload "data->>body": must be a plain column name`},
		{name: "headers as json key", cfg: Config{Columns: Columns{Headers: "meta->>h"}}, wantErr: "Columns.Headers"},
		{name: "aggregate id with empty key", cfg: Config{Columns: Columns{AggregateID: "meta->>"}}, wantErr: `Columns.AggregateID "meta->>": empty key after ->>`},
		{name: "event type with empty column", cfg: Config{Columns: Columns{EventType: "->>t"}}, wantErr: `Columns.EventType "->>t": empty column name`},
		{name: "column name quoted", cfg: Config{Columns: Columns{Payload: `"Payload"`}}, wantErr: `Columns.Payload "\"Payload\"": column name "\"Payload\"": write it without quotes`},
		{name: "column name too long", cfg: Config{Columns: Columns{ID: strings.Repeat("c", 64)}}, wantErr: "Postgres keeps only 63"},
		{name: "topic column with control character", cfg: Config{Columns: Columns{Topic: "a\nb"}}, wantErr: "control character"},
		{name: "placeholder naming a bad column", cfg: Config{TopicTemplate: "x.{" + strings.Repeat("c", 64) + "}"}, wantErr: "TopicTemplate"},
		// A column name with a brace is legal in Postgres; the default
		// template names the logical field, not the column, so it compiles.
		{name: "default template with an odd aggregate type column", cfg: Config{Columns: Columns{AggregateType: "a}b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, newErr := New(tt.cfg)
			if (err == nil) != (newErr == nil) {
				t.Fatalf("Validate() = %v but New() = %v", err, newErr)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "router: ") {
				t.Errorf("Validate() = %q, want the router: prefix", err)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Policy
		wantErr bool
	}{
		{name: "empty is fail", in: "", want: PolicyFail},
		{name: "fail", in: "fail", want: PolicyFail},
		{name: "dead-letter", in: "dead-letter", want: PolicyDeadLetter},
		{name: "underscore spelling rejected", in: "dead_letter", wantErr: true},
		{name: "skip rejected", in: "skip", wantErr: true},
		{name: "case matters", in: "Fail", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicy(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePolicy(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
			}
			if got != tt.want {
				t.Errorf("ParsePolicy(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTopicProblem(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		want  bool // valid
	}{
		{name: "plain", topic: "orders", want: true},
		{name: "all allowed characters", topic: "a-Z_0.9", want: true},
		{name: "249 characters", topic: strings.Repeat("x", 249), want: true},
		{name: "dots inside", topic: "...a", want: true},
		{name: "empty", topic: ""},
		{name: "250 characters", topic: strings.Repeat("x", 250)},
		{name: "dot", topic: "."},
		{name: "dot dot", topic: ".."},
		{name: "space", topic: "a b"},
		{name: "non-ASCII", topic: "заказы"},
		{name: "colon", topic: "a:b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := topicProblem(tt.topic) == ""; got != tt.want {
				t.Errorf("topicProblem(%q) = %q, want valid=%v", tt.topic, topicProblem(tt.topic), tt.want)
			}
			if topicProblem(tt.topic) != topicProblem([]byte(tt.topic)) {
				t.Error("string and []byte forms disagree")
			}
		})
	}
}
