package pipeline

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/decoder"
)

// TestSpoolSubXIDCapFallsBack: past maxTrackedSubXIDs subtransactions, a
// rolled back subtransaction's message is no longer placed, and the spool
// falls back (errStreamAmbiguous: protocol version 1 for the transaction)
// rather than keep the message or drop a kept one. Before the cap the same
// rollback is resolved in the stream.
func TestSpoolSubXIDCapFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		before    int // subtransactions rolled back before S
		ambiguous bool
	}{
		{"below the cap", 10, false},
		{"past the cap", maxTrackedSubXIDs, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const top = 100
			s := newSpool(t.TempDir(), 1<<40, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
			defer s.close()
			var lsn uint64
			add := func(xid uint32, kind byte) error {
				lsn++
				return s.append(&decoder.StreamChange{TopXID: top, XID: xid, Kind: kind, LSN: 0, Data: []byte{kind, byte(lsn)}})
			}
			if err := add(top, 'I'); err != nil {
				t.Fatal(err)
			}
			for i := range tc.before {
				sub := uint32(1000 + i)
				if err := add(sub, 'I'); err != nil {
					t.Fatal(err)
				}
				s.abortSub(top, sub)
			}
			// S: a row, then a message (tagged with the top-level xid),
			// then S rolls back.
			sub := uint32(1000 + tc.before)
			if err := add(sub, 'I'); err != nil {
				t.Fatal(err)
			}
			if err := add(top, 'M'); err != nil {
				t.Fatal(err)
			}
			s.abortSub(top, sub)
			err := add(top, 'I')
			if tc.ambiguous {
				if !errors.Is(err, errStreamAmbiguous) {
					t.Fatalf("past the cap: %v, want errStreamAmbiguous (a fallback)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rd, err := s.open(top)
			if err != nil {
				t.Fatal(err)
			}
			for {
				c, err := rd.next()
				if err != nil {
					break
				}
				if c.Kind == 'M' {
					t.Fatal("the rolled back message is read back")
				}
			}
		})
	}
}

// TestSpoolResolveBoundary: the boundary resolve keeps as records come
// (spoolFile.kept) is the one it computed over every tracked
// subtransaction before, for random nestings of savepoints, releases and
// rollbacks with rows and messages.
func TestSpoolResolveBoundary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for seq := range 300 {
		const top = 100
		s := newSpool(t.TempDir(), 1<<40, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
		next := uint32(1000)
		type sub struct {
			xid      uint32
			children []uint32 // released descendants with records
			records  bool
		}
		var stack []*sub
		rolled := 0
		for step := 0; step < 200; step++ {
			f := s.files[top]
			if f != nil && len(f.pending) > 0 {
				old := f.topEnd
				for x, end := range f.lastEnd {
					if !f.aborted[x] && end > old {
						old = end
					}
				}
				err := f.resolve(top)
				if f.kept != old {
					t.Fatalf("sequence %d step %d: boundary %d, want %d", seq, step, f.kept, old)
				}
				rolled++
				if err != nil {
					break // the fallback
				}
			}
			xid := uint32(top)
			if len(stack) > 0 {
				xid = stack[len(stack)-1].xid
			}
			switch op := rng.IntN(6); {
			case op == 0 && len(stack) < 6:
				stack = append(stack, &sub{xid: next})
				next++
			case op == 1 && len(stack) > 0: // release
				r := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					p := stack[len(stack)-1]
					p.children = append(p.children, r.children...)
					if r.records {
						p.children = append(p.children, r.xid)
					}
				}
			case op == 2 && len(stack) > 0: // rollback
				r := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if r.records {
					s.abortSub(top, r.xid)
				}
				for _, c := range r.children {
					s.abortSub(top, c)
				}
			case op == 3:
				if err := s.append(&decoder.StreamChange{TopXID: top, XID: top, Kind: 'M', Data: []byte{'M'}}); err != nil {
					t.Fatal(err)
				}
			default:
				if err := s.append(&decoder.StreamChange{TopXID: top, XID: xid, Kind: 'I', Data: []byte{'I'}}); err != nil {
					t.Fatal(err)
				}
				if len(stack) > 0 {
					stack[len(stack)-1].records = true
				}
			}
		}
		s.close()
	}
}

// TestSpoolSubdirectoryRemoved: the process's spool subdirectory removed
// under it (a /tmp cleaner, an operator's rm) is made again for the next
// transaction. It failed when the subdirectory was made once per process:
// every later streamed transaction failed the spool (ENOENT) and fell back
// to protocol version 1, for as long as the process ran.
func TestSpoolSubdirectoryRemoved(t *testing.T) {
	s := newSpool(t.TempDir(), 1<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
	defer s.close()
	if err := s.append(&decoder.StreamChange{TopXID: 7, XID: 7, Kind: 'I', Data: []byte("I")}); err != nil {
		t.Fatal(err)
	}
	s.drop(7)
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	if err := s.append(&decoder.StreamChange{TopXID: 8, XID: 8, Kind: 'I', Data: []byte("I")}); err != nil {
		t.Fatalf("after the subdirectory was removed: %v", err)
	}
	rd, err := s.open(8)
	if err != nil || rd == nil {
		t.Fatalf("open: %v", err)
	}
	if c, err := rd.next(); err != nil || string(c.Data) != "I" {
		t.Fatalf("read back: %v, %v", c, err)
	}
}
