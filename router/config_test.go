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

		{name: "unknown policy", cfg: Config{InvalidRows: "skip"}, wantErr: `unknown invalid_rows policy "skip"`},
		{name: "dead letter without topic", cfg: Config{InvalidRows: PolicyDeadLetter}, wantErr: "needs a dead_letter_topic"},
		{name: "dead letter topic with fail policy", cfg: Config{DeadLetterTopic: "dlq"}, wantErr: "would never be used"},
		{name: "dead letter topic invalid", cfg: Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dead letters"}, wantErr: `dead_letter_topic "dead letters": topic name contains " "`},
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

		{name: "payload as json key", cfg: Config{Columns: Columns{Payload: "data->>body"}}, wantErr: "columns.payload \"data->>body\": must be a plain column name"},
		{name: "headers as json key", cfg: Config{Columns: Columns{Headers: "meta->>h"}}, wantErr: "columns.headers"},
		{name: "aggregate id with empty key", cfg: Config{Columns: Columns{AggregateID: "meta->>"}}, wantErr: "columns.aggregate_id: \"meta->>\": empty key"},
		{name: "event type with empty column", cfg: Config{Columns: Columns{EventType: "->>t"}}, wantErr: "columns.event_type"},
		{name: "default template follows aggregate type column", cfg: Config{Columns: Columns{AggregateType: "a}b"}}, wantErr: "unmatched }"},
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
