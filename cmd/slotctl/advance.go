package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/walbox/walbox/slotctl"
)

const advanceHelp = `Usage: slotctl advance --to LSN [--yes] [--json] [--config FILE] [--pg-dsn DSN] [--slot NAME] [--publication NAME] [--timeout D]

Moves the slot's confirmed position forward to LSN (pg_replication_slot_advance):
every outbox event of a transaction whose commit starts before LSN is then
never streamed from this slot. Before asking, it says how much WAL that skips
and how many outbox events (it counts what walbox routes in between: the
inserts into the outbox tables and, with --message-prefix, the transactional
messages of that prefix, by decoding a temporary copy of the slot, which the server drops even
if slotctl dies; "could not count" if that fails). The server does not move a
slot past its current WAL position: asked for more, slotctl stops at the
WAL end it saw, so what it skips is exactly what it counted.

Refuses (exit 3, nothing changed) to move the slot backwards, and while a
process streams from it.

  --to LSN   the new position, as Postgres prints it, e.g. 16/B374D848 (required)
  --yes      do not ask; required when stdin is not a terminal
  --json     print the result as JSON: {"slot", "from", "requested", "to",
             "skipped_wal_bytes", "skipped_events" (null if not counted), "count_error"}

On a terminal, asks you to type the slot's name.
`

// advanceOptions are the flags of `slotctl advance`.
type advanceOptions struct {
	commonOptions
	To   string
	Yes  bool
	JSON bool
}

// advanceResult is what advance prints with --json.
type advanceResult struct {
	Slot            string `json:"slot"`
	From            string `json:"from"`      // confirmed_flush_lsn before
	Requested       string `json:"requested"` // --to
	To              string `json:"to"`        // confirmed_flush_lsn after
	SkippedWALBytes int64  `json:"skipped_wal_bytes"`
	SkippedWAL      string `json:"skipped_wal"`
	// SkippedEvents is null when they could not be counted (CountError).
	SkippedEvents *int64 `json:"skipped_events"`
	CountError    string `json:"count_error,omitempty"`
}

func runAdvance(ctx context.Context, args []string, e env) error {
	var o advanceOptions
	fs := flag.NewFlagSet("advance", flag.ContinueOnError)
	fs.StringVar(&o.To, "to", "", "")
	fs.BoolVar(&o.Yes, "yes", false, "")
	fs.BoolVar(&o.JSON, "json", false, "")
	if err := o.load(o.command("advance", fs, connOptions, countOptions), args, e, advanceHelp); err != nil {
		return err
	}
	if o.To == "" {
		return usageError{"--to LSN is required, e.g. --to 16/B374D848 (see the slot's position with `slotctl inspect`)"}
	}
	to, err := slotctl.ParseLSN(o.To)
	if err != nil {
		return err
	}
	cfg := o.slotConfig(false)
	if !o.Yes && !e.stdinIsTTY {
		return usageError{"refusing to advance without --yes: stdin is not a terminal, so there is no one to confirm"}
	}

	lookCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(lookCtx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	slot, err := slotctl.Inspect(lookCtx, conn, cfg.Slot)
	if err != nil {
		return err
	}
	if err := slotctl.CheckAdvance(slot, to); err != nil {
		return err
	}
	walEnd, err := slotctl.CurrentWALLSN(lookCtx, conn)
	if err != nil {
		return err
	}
	// The server stops at its WAL end anyway; stopping where slotctl looked
	// keeps transactions committed since out of what it skips, so the
	// count below is exactly what is skipped.
	target := min(to, walEnd)
	res := advanceResult{Slot: slot.Name, From: slot.ConfirmedFlushLSN.String(), Requested: to.String()}
	if target > slot.ConfirmedFlushLSN {
		res.SkippedWALBytes = int64(target - slot.ConfirmedFlushLSN)
	}
	res.SkippedWAL = bytesIEC(res.SkippedWALBytes)
	events := ""
	if n, err := o.countEvents(ctx, slot.Name, target); err != nil {
		res.CountError = countFailure(err)
		events = "; could not count the outbox events it skips (" + res.CountError + ")"
	} else {
		res.SkippedEvents = &n
		events = fmt.Sprintf(" and %d outbox event(s) (%s)", n, o.events())
	}
	fmt.Fprintf(e.stderr, "Advancing slot %q from %s to %s skips %s of WAL%s; what it skips will not be streamed from this slot.\n",
		slot.Name, slot.ConfirmedFlushLSN, to, bytesIEC(res.SkippedWALBytes), events)
	if to > walEnd {
		fmt.Fprintf(e.stderr, "The server's WAL ends at %s: the slot stops there (run advance again later to go further).\n", walEnd)
	}
	if !o.Yes {
		if err := confirmNothing(ctx, e, fmt.Sprintf("Type %q to confirm: ", slot.Name), slot.Name, "nothing was advanced"); err != nil {
			return err
		}
	}

	advCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	end, err := slotctl.Advance(advCtx, conn, slot.Name, target)
	if err != nil {
		return err
	}
	res.To = end.String()
	if o.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(e.stdout, "advanced slot %s from %s to %s\n", slot.Name, slot.ConfirmedFlushLSN, end)
	return nil
}
