package pipeline

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// BenchmarkSentLedgerAcked counts records of 4-record transactions as
// the ack path does (at least once), past the ledger's bound.
func BenchmarkSentLedgerAcked(b *testing.B) {
	var l sentLedger
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.acked(replayKey{commit: pglogrepl.LSN(i/4 + 1), ord: uint32(i % 4)}, false)
	}
}
