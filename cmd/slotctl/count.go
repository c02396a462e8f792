package main

import (
	"context"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/slotctl"
)

// countEvents counts the events (what walbox routes: the outbox tables'
// inserts and, with --message-prefix, its messages) moving slot to upto skips (0: all it
// holds), see slotctl.CountEvents, on a connection of its own bounded by
// --timeout: decoding a slot that holds much WAL takes time, and when it
// times out pgx closes the connection, which must not be the one the
// command goes on with. The temporary copy goes with that session.
func (o *commonOptions) countEvents(ctx context.Context, slot string, upto pglogrepl.LSN) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	return slotctl.CountEvents(ctx, conn, slot, o.events(), upto)
}

// events are what walbox run routes with this configuration.
func (o *commonOptions) events() slotctl.Events {
	cfg := o.slotConfig(false)
	return slotctl.Events{Publication: cfg.Publication, Table: cfg.Table, MessagePrefix: o.cfg.MessagePrefix}
}

// countFailure is why counting failed, without the library's prefixes.
func countFailure(err error) string {
	msg := strings.ReplaceAll(err.Error(), "slotctl: ", "")
	return strings.TrimPrefix(msg, "could not count events: ")
}
