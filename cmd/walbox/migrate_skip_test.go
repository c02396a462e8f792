package main

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/router"
)

type fakeRouter struct{}

func (fakeRouter) Route(ins *decoder.Insert) (router.Routed, error) {
	return router.Routed{Record: &kgo.Record{Topic: "t", Value: []byte(ins.LSN.String())}}, nil
}

type fakeProducer struct{ produced []string }

func (p *fakeProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.produced = append(p.produced, string(r.Value))
	promise(r, nil)
}

func (p *fakeProducer) Flush(context.Context) error { return nil }

// The inserts of Debezium's last transaction up to its offset are
// acknowledged without being produced; the rest of that transaction, and
// other transactions, are produced. A second streaming of the transaction
// (after a reconnect) skips the same ones.
func TestSentSkipper(t *testing.T) {
	s := newSentSkipper(7, 200)
	fp := &fakeProducer{}
	rt, p := skipRouter{fakeRouter{}, s}, skipProducer{fp, s}
	acked := 0
	for range 2 {
		for _, ins := range []*decoder.Insert{{XID: 7, LSN: 100}, {XID: 7, LSN: 200}, {XID: 7, LSN: 300}, {XID: 8, LSN: 150}} {
			routed, err := rt.Route(ins)
			if err != nil {
				t.Fatal(err)
			}
			p.Produce(context.Background(), routed.Record, func(*kgo.Record, error) { acked++ })
		}
	}
	if acked != 8 || s.Skipped() != 4 {
		t.Errorf("acked %d, skipped %d; want 8 and 4", acked, s.Skipped())
	}
	if want := []string{"0/12C", "0/96", "0/12C", "0/96"}; len(fp.produced) != len(want) || fp.produced[0] != want[0] || fp.produced[1] != want[1] {
		t.Errorf("produced %v, want %v", fp.produced, want)
	}
}
