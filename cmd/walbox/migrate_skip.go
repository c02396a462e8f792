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
// its router marks the records of transaction xid before upTo, and the
// first atUpTo of those at upTo (the rows of one COPY share an LSN), and
// its producer acknowledges a marked record at once instead of producing
// it, so the relay confirms the transaction as usual.
//
// After a reconnect that streams the transaction again, the records before
// upTo are marked again. Those at upTo are told apart only by their order,
// so the skipper counts, over the process's life, the inserts at upTo it
// was asked to route and marks only the first atUpTo of that count. That
// never marks one Debezium had not sent: a stream routes the inserts at
// upTo in order, from the first it does not drop as already acknowledged
// by an earlier stream (the relay's reconnect dedup), and each it drops was
// routed, and counted, by an earlier stream; so the k-th insert routed is
// at most the k-th at upTo. When the dedup does not drop them (its window
// is bounded), the same inserts come again past the count and are sent:
// duplicates, never loss.
type sentSkipper struct {
	xid    uint32
	upTo   pglogrepl.LSN
	atUpTo int

	mu      sync.Mutex
	routed  int // inserts at upTo routed so far
	marked  map[*kgo.Record]struct{}
	skipped int
}

func newSentSkipper(xid uint32, upTo pglogrepl.LSN, atUpTo int) *sentSkipper {
	return &sentSkipper{xid: xid, upTo: upTo, atUpTo: atUpTo, marked: map[*kgo.Record]struct{}{}}
}

type skipRouter struct {
	pipeline.Router
	s *sentSkipper
}

func (r skipRouter) Route(ins *decoder.Insert) (router.Routed, error) {
	routed, err := r.Router.Route(ins)
	if err != nil || ins.XID != r.s.xid || ins.LSN > r.s.upTo {
		return routed, err
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	skip := ins.LSN < r.s.upTo
	if ins.LSN == r.s.upTo {
		r.s.routed++
		skip = r.s.routed <= r.s.atUpTo
	}
	if skip && routed.Record != nil && !routed.DeadLetter {
		r.s.marked[routed.Record] = struct{}{}
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
