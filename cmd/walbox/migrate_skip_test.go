package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
// (after a reconnect) skips the same ones before the offset's LSN.
func TestSentSkipper(t *testing.T) {
	s := newSentSkipper(7, 200, 1)
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
	// The second time, the insert at 200 is produced: in the relay the
	// reconnect dedup drops it before routing (TestSentSkipperCopy).
	if want := []string{"0/12C", "0/96", "0/C8", "0/12C", "0/96"}; acked != 8 || s.Skipped() != 3 || !slices.Equal(fp.produced, want) {
		t.Errorf("acked %d, skipped %d, produced %v; want 8, 3, %v", acked, s.Skipped(), fp.produced, want)
	}
}

// namedRouter routes each insert to a record named after it.
type namedRouter map[*decoder.Insert]string

func (r namedRouter) Route(ins *decoder.Insert) (router.Routed, error) {
	return router.Routed{Record: &kgo.Record{Topic: "t", Value: []byte(r[ins])}}, nil
}

// Debezium stopped after sending 3 of the 5 rows of a COPY at LSN 200
// (lsn_events_processed 3), after the insert at 100. Only those 3 and the
// one at 100 are skipped, however the transaction is streamed again: after
// a reconnect in the middle of the COPY, with the relay's dedup dropping
// the inserts acknowledged before it, or after a reconnect whose dedup
// window no longer holds them (everything routed again: duplicates, never
// one of the 2 unsent rows skipped). Before, every insert at 200 was
// skipped: the 2 rows Debezium never sent were lost.
func TestSentSkipperCopy(t *testing.T) {
	ins := []*decoder.Insert{{XID: 7, LSN: 100}, {XID: 7, LSN: 200}, {XID: 7, LSN: 200}, {XID: 7, LSN: 200}, {XID: 7, LSN: 200}, {XID: 7, LSN: 200}, {XID: 7, LSN: 300}}
	names := namedRouter{}
	for i, in := range ins {
		names[in] = fmt.Sprintf("%d#%d", in.LSN, i)
	}
	const unsent = "200#4 200#5 300#6" // Debezium never sent these
	tests := []struct {
		name string
		// streams lists, per streaming of the transaction, the indexes
		// of ins the relay routes (the others it dropped as
		// acknowledged before a reconnect, or had not reached).
		streams [][]int
		want    string // produced
	}{
		{name: "one stream", streams: [][]int{{0, 1, 2, 3, 4, 5, 6}}, want: unsent},
		{name: "reconnect inside the COPY, dedup drops what was acknowledged", streams: [][]int{{0, 1, 2}, {3, 4, 5, 6}}, want: unsent},
		{name: "reconnect after two skipped rows, dedup window lost", streams: [][]int{{0, 1, 2}, {0, 1, 2, 3, 4, 5, 6}}, want: "200#2 200#3 " + unsent},
		{name: "reconnect after the COPY, dedup window lost", streams: [][]int{{0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6}}, want: "200#4 200#5 200#1 200#2 200#3 200#4 200#5 300#6"},
		{name: "reconnect after the first row, dedup drops it", streams: [][]int{{0, 1}, {2, 3, 4, 5, 6}}, want: unsent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSentSkipper(7, 200, 3)
			fp := &fakeProducer{}
			rt, p := skipRouter{names, s}, skipProducer{fp, s}
			for _, stream := range tt.streams {
				for _, i := range stream {
					routed, err := rt.Route(ins[i])
					if err != nil {
						t.Fatal(err)
					}
					p.Produce(context.Background(), routed.Record, func(*kgo.Record, error) {})
				}
			}
			if got := strings.Join(fp.produced, " "); got != tt.want {
				t.Errorf("produced %q, want %q", got, tt.want)
			}
			for _, u := range strings.Fields(unsent) {
				if !slices.Contains(fp.produced, u) {
					t.Errorf("%s, which Debezium never sent, was not produced", u)
				}
			}
		})
	}
}
