package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/walbox/walbox/slotctl"
)

const copyHelp = `Usage: slotctl copy --to NAME [--json] [--config FILE] [--pg-dsn DSN] [--slot NAME] [--timeout D]

Copies the slot into a new permanent slot named NAME
(pg_copy_logical_replication_slot): same plugin, same confirmed position, so
a consumer of the copy receives what walbox would receive from the slot from
now on. The copy holds WAL from the slot's restart_lsn on until it is
consumed or dropped (slotctl drop --slot NAME): do not leave it unused.
Refuses a NAME that already exists (exit 1). Use it before an experiment
(advance, a test consumer) to keep the old position. On PostgreSQL 17+ the
copy is not a failover slot, even if the slot is. There is no --temporary: a
temporary copy would vanish with slotctl's own session.

  --to NAME   the copy's name: 1 to 63 characters of a-z, 0-9 and _ (required)
  --json      print the copy as JSON, as inspect prints a slot
`

// copyOptions are the flags of `slotctl copy`.
type copyOptions struct {
	commonOptions
	To   string
	JSON bool
}

func runCopy(ctx context.Context, args []string, e env) error {
	var o copyOptions
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	fs.StringVar(&o.To, "to", "", "")
	fs.BoolVar(&o.JSON, "json", false, "")
	if err := o.load(o.command("copy", fs, connOptions), args, e, copyHelp); err != nil {
		return err
	}
	if o.To == "" {
		return usageError{"--to NAME is required: the name of the new slot"}
	}
	if err := slotctl.ValidateSlotName(o.To); err != nil {
		return err // exit 2
	}
	cfg := o.slotConfig(false)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	s, err := slotctl.CopySlot(ctx, conn, cfg.Slot, o.To)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "slotctl copy: slot %s holds WAL from %s on until it is consumed or dropped (slotctl drop --slot %s)\n",
		s.Name, s.RestartLSN, s.Name)
	if o.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(newSlotJSON(s))
	}
	fmt.Fprintf(e.stdout, "copied slot %s to %s at %s\n", cfg.Slot, s.Name, s.ConfirmedFlushLSN)
	fmt.Fprintf(e.stdout, "slot %s\n", s.Name)
	writeSlotText(e.stdout, s)
	return nil
}
