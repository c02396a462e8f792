package debeziumtest_test

import (
	"os"
	"testing"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
)

// TestKillResendsUnflushed shows what a crash of Debezium means, which the
// takeover and comparison tests rely on: Kill writes no offsets, so after a
// Restart Debezium streams again from the slot's confirmed position, and
// an event it had already delivered is delivered a second time
// (Debezium's at-least-once window), none lost.
func TestKillResendsUnflushed(t *testing.T) {
	fulltest.Require(t, "the Kafka Connect harness under a kill")
	f := newFixture(t, "kill")
	c := debeziumtest.StartT(t, f.opts)
	const id = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	if _, err := f.conn.Exec(f.ctx, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ($1, 'customer', 'c-1', 'CustomerCreated', '{"name": "Ada"}')`, id); err != nil {
		t.Fatal(err)
	}
	cl := f.consume(t, "outbox.event.customer")
	if got := header(f.poll(t, cl, 1)[0], "id"); got != id {
		t.Fatalf("first delivery: id %q, want %q", got, id)
	}

	c.Kill()
	if fi, err := os.Stat(c.OffsetsFile()); err == nil && fi.Size() > 0 {
		t.Fatalf("offsets file has %d bytes after a kill with no flush due; the test cannot tell a resend from a flush", fi.Size())
	}
	if err := c.Restart(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := header(f.poll(t, cl, 1)[0], "id"); got != id {
		t.Fatalf("after the restart: id %q, want the same event %q again", got, id)
	}
}
