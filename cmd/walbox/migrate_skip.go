package main

import (
	"context"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// Debezium may stop inside a transaction, having sent part of it; walbox
// streams from transaction boundaries, so it receives that transaction
// whole. sentSkipper keeps the part Debezium sent from being sent again:
// its router marks the records of transaction xid at or before upTo, and
// its producer acknowledges a marked record at once instead of producing
// it, so the relay confirms the transaction as usual. After a reconnect
// that streams the transaction again, the same records are marked again.
type sentSkipper struct {
	xid  uint32
	upTo pglogrepl.LSN

	mu      sync.Mutex
	marked  map[*kgo.Record]struct{}
	skipped int
}

func newSentSkipper(xid uint32, upTo pglogrepl.LSN) *sentSkipper {
	return &sentSkipper{xid: xid, upTo: upTo, marked: map[*kgo.Record]struct{}{}}
}

type skipRouter struct {
	pipeline.Router
	s *sentSkipper
}

func (r skipRouter) Route(ins *decoder.Insert) (router.Routed, error) {
	routed, err := r.Router.Route(ins)
	if err == nil && routed.Record != nil && !routed.DeadLetter && ins.XID == r.s.xid && ins.LSN <= r.s.upTo {
		r.s.mu.Lock()
		r.s.marked[routed.Record] = struct{}{}
		r.s.mu.Unlock()
	}
	return routed, err
}

type skipProducer struct {
	pipeline.Producer
	s *sentSkipper
}

func (p skipProducer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.s.mu.Lock()
	_, skip := p.s.marked[r]
	if skip {
		delete(p.s.marked, r)
		p.s.skipped++
	}
	p.s.mu.Unlock()
	if skip {
		promise(r, nil) // Debezium sent it: acknowledged without producing it again
		return
	}
	p.Producer.Produce(ctx, r, promise)
}

// Skipped returns how many records were not sent again.
func (s *sentSkipper) Skipped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

var (
	_ pipeline.Router   = skipRouter{}
	_ pipeline.Producer = skipProducer{}
)
