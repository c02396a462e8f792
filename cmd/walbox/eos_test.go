package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/pipeline"
)

func TestCrashHook(t *testing.T) {
	for _, tt := range []struct {
		spec    string
		calls   []string
		killAt  int // index into calls of the kill, -1 for none
		wantErr string
	}{
		{spec: "", calls: []string{"produced"}, killAt: -1},
		{spec: "committed:2", calls: []string{"produced", "committed", "confirmed", "produced", "committed"}, killAt: 4},
		{spec: "produced:1", calls: []string{"produced", "produced"}, killAt: 0},
		{spec: "confirmed:3", calls: []string{"confirmed", "confirmed"}, killAt: -1},
		{spec: "committed", wantErr: "expected <phase>:<n>"},
		{spec: "committed:0", wantErr: "expected <phase>:<n>"},
		{spec: "flushed:1", wantErr: "expected <phase>:<n>"},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			killed := -1
			call := 0
			hook, err := crashHook(tt.spec, func() { killed = call })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), crashAtEnv) {
					t.Fatalf("crashHook(%q) = %v, want an error naming %s with %q", tt.spec, err, crashAtEnv, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.spec == "" {
				if hook != nil {
					t.Fatal("a hook is installed without the variable")
				}
				return
			}
			for i, p := range tt.calls {
				call = i
				hook(p)
			}
			if killed != tt.killAt {
				t.Fatalf("killed at call %d, want %d", killed, tt.killAt)
			}
		})
	}
}

// TestRunExactlyOnce runs walbox run with --delivery exactly-once: the
// state topic is created compacted with one partition, the events arrive
// for a read_committed consumer, and the position is recorded under the
// default transactional id.
func TestRunExactlyOnce(t *testing.T) {
	e := newTableEnv(t)
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.Delivery = pipeline.DeliveryExactlyOnce
	cfg.TransactionMaxInterval = 20 * time.Millisecond
	in := startInstance(t, cfg)
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	e.insert(t, "order", 3, 1, 2, 3)
	e.insert(t, "order", 3, 4, 5)

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics("outbox.event.order"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < 5 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != 5 {
		t.Fatalf("read_committed got %d records %v, want 5\n%s", len(got), got, in.logs.Tail(3000))
	}
	in.stop(t)

	adm := kadm.NewClient(cl)
	rcs, err := adm.DescribeTopicConfigs(ctx, cfg.StateTopic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(cfg.StateTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Errorf("state topic cleanup.policy = %q, want compact", policy)
	}
	pos, err := pipeline.NewKafkaState(pipeline.KafkaConfig{Brokers: e.brokers}, cfg.StateTopic).Last(ctx, "walbox-"+cfg.Slot)
	if err != nil {
		t.Fatal(err)
	}
	if pos.CommitLSN == 0 {
		t.Fatalf("no position recorded under walbox-%s", cfg.Slot)
	}
	if !strings.Contains(in.logs.String(), `msg="exactly-once delivery" transactional_id=walbox-`+cfg.Slot) {
		t.Errorf("start log does not name the transactional id:\n%s", in.logs.Tail(3000))
	}
}
