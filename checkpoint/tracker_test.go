package checkpoint

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestTrackerConfirmsOnlyFullyAckedPrefix(t *testing.T) {
	tests := []struct {
		name string
		run  func(tr *Tracker) pglogrepl.LSN
		want pglogrepl.LSN
	}{
		{
			name: "nothing received keeps the start position",
			run:  func(tr *Tracker) pglogrepl.LSN { return tr.Confirmed() },
			want: 100,
		},
		{
			name: "committed and acked transaction is confirmed at its end",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(2)
				tr.Commit(a, 200)
				a.Ack()
				a.Ack()
				return tr.Confirmed()
			},
			want: 200,
		},
		{
			name: "acked but uncommitted transaction is not confirmed",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(1)
				a.Ack()
				return tr.Confirmed()
			},
			want: 100,
		},
		{
			name: "later transaction acked first waits for the earlier one",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(1)
				tr.Commit(a, 200)
				b := tr.Begin()
				b.Add(1)
				tr.Commit(b, 300)
				b.Ack()
				return tr.Confirmed()
			},
			want: 100,
		},
		{
			name: "earlier ack releases both",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(1)
				tr.Commit(a, 200)
				b := tr.Begin()
				b.Add(1)
				tr.Commit(b, 300)
				b.Ack()
				tr.Confirmed()
				a.Ack()
				return tr.Confirmed()
			},
			want: 300,
		},
		{
			name: "empty committed transaction is confirmed at once",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				tr.Commit(a, 150)
				return tr.Confirmed()
			},
			want: 150,
		},
		{
			name: "keepalive position confirmed when idle",
			run: func(tr *Tracker) pglogrepl.LSN {
				return tr.ObserveServerPosition(500)
			},
			want: 500,
		},
		{
			// The bug this guards against: a connector confirmed the
			// keepalive position while records were unacked; after a crash
			// the slot resumed past them and they were never sent.
			name: "keepalive position ignored while a record is unacked",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(1)
				tr.Commit(a, 200)
				return tr.ObserveServerPosition(500)
			},
			want: 100,
		},
		{
			name: "keepalive position ignored while a transaction is partly received",
			run: func(tr *Tracker) pglogrepl.LSN {
				tr.Begin()
				return tr.ObserveServerPosition(500)
			},
			want: 100,
		},
		{
			name: "keepalive position never moves the confirmed position back",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				tr.Commit(a, 400)
				return tr.ObserveServerPosition(300)
			},
			want: 400,
		},
		{
			name: "abandoned open transaction does not block later ones",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(3)
				a.Ack()
				tr.Abandon()
				b := tr.Begin()
				b.Add(1)
				tr.Commit(b, 250)
				b.Ack()
				return tr.Confirmed()
			},
			want: 250,
		},
		{
			// A record of a that will never be acked (it failed before a
			// reconnect) must not block the transactions of the replay.
			name: "rewind drops stuck transactions and keeps the confirmed position",
			run: func(tr *Tracker) pglogrepl.LSN {
				a := tr.Begin()
				a.Add(1)
				tr.Commit(a, 200)
				tr.Begin()
				if got := tr.Rewind(); got != 100 {
					return got
				}
				b := tr.Begin()
				b.Add(1)
				tr.Commit(b, 200)
				b.Ack()
				return tr.Confirmed()
			},
			want: 200,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.run(New(100)); got != tt.want {
				t.Fatalf("confirmed = %v, want %v", got, tt.want)
			}
		})
	}
}

// model is the obvious, slow definition of the confirmed position.
type modelTxn struct {
	end       pglogrepl.LSN
	committed bool
	records   int
	acked     int
}

func modelConfirmed(start pglogrepl.LSN, txns []*modelTxn) pglogrepl.LSN {
	c := start
	for _, m := range txns {
		if !m.committed || m.acked < m.records {
			break
		}
		c = m.end
	}
	return c
}

// checkRandomSchedule drives the tracker with transactions interleaved the way
// a producer sees them: records of several transactions in flight at once,
// acks arriving in any order, Confirmed polled at random moments.
func checkRandomSchedule(t *testing.T, rng *rand.Rand) {
	t.Helper()
	const start = pglogrepl.LSN(1000)
	tr := New(start)
	var (
		model   []*modelTxn
		txns    []*Txn
		unacked []int // index of the transaction of every unacked record
		open    = -1
		end     = start
	)
	steps := 50 + rng.IntN(500)
	for step := 0; step < steps; step++ {
		switch op := rng.IntN(10); {
		case op < 2 && open < 0: // begin
			txns = append(txns, tr.Begin())
			model = append(model, &modelTxn{})
			open = len(txns) - 1
		case op < 5 && open >= 0: // produce a record
			txns[open].Add(1)
			model[open].records++
			unacked = append(unacked, open)
		case op < 6 && open >= 0: // commit
			end += pglogrepl.LSN(1 + rng.IntN(100))
			tr.Commit(txns[open], end)
			model[open].committed = true
			model[open].end = end
			open = -1
		case op < 9 && len(unacked) > 0: // ack a random in-flight record
			i := rng.IntN(len(unacked))
			ti := unacked[i]
			unacked = append(unacked[:i], unacked[i+1:]...)
			txns[ti].Ack()
			model[ti].acked++
		default:
		}
		if got, want := tr.Confirmed(), modelConfirmed(start, model); got != want {
			t.Fatalf("step %d: confirmed %v, model says %v", step, got, want)
		}
		idle := open < 0 && len(unacked) == 0
		for _, m := range model {
			if !m.committed || m.acked < m.records {
				idle = false
			}
		}
		if tr.Idle() != idle {
			t.Fatalf("step %d: Idle() = %v, model says %v", step, tr.Idle(), idle)
		}
	}
}

func TestTrackerRandomSchedulesMatchModel(t *testing.T) {
	for seed := uint64(0); seed < 500; seed++ {
		checkRandomSchedule(t, rand.New(rand.NewPCG(seed, seed*7+1)))
	}
}

func FuzzTrackerSchedule(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(0))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkRandomSchedule(t, rand.New(rand.NewPCG(a, b)))
	})
}

// TestTrackerConcurrentAcks acks from many goroutines, as franz-go's promise
// callbacks do, while the owner polls; run it with -race.
func TestTrackerConcurrentAcks(t *testing.T) {
	tr := New(1)
	const txnCount, perTxn = 200, 50
	txns := make([]*Txn, txnCount)
	for i := range txns {
		txns[i] = tr.Begin()
		txns[i].Add(perTxn)
		tr.Commit(txns[i], pglogrepl.LSN(10+i))
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range txns {
				for r := w; r < perTxn; r += 4 {
					txns[i].Ack()
				}
			}
		}()
	}
	for tr.Confirmed() < pglogrepl.LSN(10+txnCount-1) {
		if tr.Queued() == 0 {
			break
		}
	}
	wg.Wait()
	if got, want := tr.Confirmed(), pglogrepl.LSN(10+txnCount-1); got != want {
		t.Fatalf("confirmed %v after all acks, want %v", got, want)
	}
	if tr.Queued() != 0 {
		t.Fatalf("%d transactions still queued", tr.Queued())
	}
}

func BenchmarkTrackerSmallTransactions(b *testing.B) {
	tr := New(1)
	lsn := pglogrepl.LSN(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		t := tr.Begin()
		t.Add(1)
		lsn += 100
		tr.Commit(t, lsn)
		t.Ack()
		tr.Confirmed()
	}
}
