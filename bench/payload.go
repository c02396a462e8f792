package bench

import (
	"context"
	"fmt"
	"path/filepath"
)

// Default size of the large-payload scenario.
const (
	// LargePayloadBytes is the payload of the large-payload scenario: about
	// 1 MB, as large as a record can be and still fit, with its key and
	// headers, into walbox's default producer batch (1,000,012 bytes).
	LargePayloadBytes = 990_000
	// LargePayloadRows and LargePayloadTxn: 200 rows (about 200 MB) in
	// transactions of 10.
	LargePayloadRows = 200
	LargePayloadTxn  = 10
)

// largePayload runs the large-payload scenario: rows of about 1 MB each,
// written while no relay runs, drained by walbox as its own process. It
// shows that walbox's memory stays bounded by its in-flight byte budget
// rather than growing with the records' size.
func (r *Runner) largePayload(ctx context.Context) {
	c := r.cfg
	rows, txnSize, size := c.LargePayloadRows, c.LargePayloadTxn, c.LargePayloadBytes
	if rows <= 0 {
		rows = LargePayloadRows
	}
	if txnSize <= 0 {
		txnSize = LargePayloadTxn
	}
	if size <= 0 {
		size = LargePayloadBytes
	}
	txns := max(rows/txnSize, 1)
	rows = txns * txnSize
	res := &PayloadResult{Rows: rows, TxnSize: txnSize, PayloadBytes: size}
	r.res.Payload = res
	if err := r.env.ResetOutbox(ctx); err != nil {
		r.fail("payload", err)
		return
	}
	if _, err := r.env.CreateSlot(ctx, "bench_walbox"); err != nil {
		r.fail("payload", err)
		return
	}
	r.progress("payload: writing %d rows of ~%d-byte payloads in transactions of %d", rows, size, txnSize)
	lr, err := r.env.LoadSized(ctx, r.ids(rows), txns, txnSize, 1, c.Aggregates, size)
	if err != nil {
		r.fail("payload", err)
		return
	}
	res.LoadSeconds = lr.Duration.Seconds()
	target, err := r.env.currentLSN(ctx)
	if err != nil {
		r.fail("payload", err)
		return
	}
	logPath := filepath.Join(c.OutDir, "walbox-payload.log")
	run := r.drain(ctx, r.env.NewWalboxProcess(r.bin, "bench_walbox", r.prefix("payload", "walbox"), c.WalboxLinger, logPath),
		rows, target, lr.PayloadBytes, 0, nil, nil)
	res.Runs = append(res.Runs, run)
	if run.Error != "" {
		r.fail("payload "+run.Relay, fmt.Errorf("%s", run.Error))
		return
	}
	r.progress("payload: %-16s %8d rows drained in %6.2fs (%.0f events/s, %.1f MB/s)%s (other processes: %.0f%% CPU)",
		run.Relay, rows, run.DrainSeconds, run.EventsPerSec, run.MBPerSec, rssNote(run.PeakRSSBytes), run.OtherCPUPct)
}
