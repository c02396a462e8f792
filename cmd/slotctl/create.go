package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

const createHelp = `Usage: slotctl create [--config FILE] [--pg-dsn DSN] [--table schema.table] [--slot NAME] [--publication NAME]
                      [--failover-slot] [--topic T] [--column-* NAME] [--timeout D]

Checks the server (PostgreSQL 14+, wal_level = logical, a role with REPLICATION,
the outbox table exists and is readable, replication slots enabled), then
creates what is missing, in this order:
  1. the publication: CREATE PUBLICATION <publication> FOR TABLE <table>
     WITH (publish = 'insert'). PostgreSQL requires the table's owner; as the
     least-privilege walbox role, have an admin run migrations/002_publication.sql.
  2. the slot: a pgoutput logical replication slot in the connected database.
     It streams transactions committed after its creation only: when the
     outbox table already holds rows, create warns on stderr (still exit 0)
     that they will not be sent, with their count and how to send them.
With --failover-slot the slot is created as a failover slot (PostgreSQL 17+).
Existing objects are verified, never changed. Prints the result on stdout.
The routing options (--topic, --column-*) are those of walbox run: create
checks that the table has every column they name.
`

// createOptions are the flags of `slotctl create`.
type createOptions struct {
	commonOptions
}

func runCreate(ctx context.Context, args []string, e env) error {
	var o createOptions
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	cmd := o.command("create", fs, connOptions, createConfigOptions)
	if err := o.load(cmd, args, e, createHelp); err != nil {
		return err
	}
	// The routing is validated by Load, so New cannot fail here.
	rt, err := router.New(o.cfg.RouterConfig())
	if err != nil {
		return err
	}
	cfg := o.slotConfig(true)
	cfg.Columns = rt // create refuses a table lacking a column the routing names
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return create(ctx, conn, cfg, e.stdout, e.stderr)
}

// create ensures the publication and slot, reporting what it did on w and
// warnings on stderr.
func create(ctx context.Context, conn *pgx.Conn, cfg slotctl.Config, w, stderr io.Writer) error {
	// Looked up first only to tell "created" from "verified"; Ensure
	// reports every real problem.
	_, pubErr := slotctl.InspectPublication(ctx, conn, cfg.Publication)
	_, slotErr := slotctl.Inspect(ctx, conn, cfg.Slot)
	var existing []slotctl.TableRows
	if errors.Is(slotErr, slotctl.ErrSlotNotFound) {
		// Counted before the slot exists: rows already in the table are
		// never streamed by it. A failure is Ensure's to report.
		existing, _ = slotctl.ExistingRows(ctx, conn, cfg)
	}
	info, slot, err := slotctl.Ensure(ctx, conn, cfg)
	if err != nil {
		return err
	}
	for _, r := range existing {
		fmt.Fprintf(stderr, "slotctl create: warning: %s\n", r.UnsentWarning(slot.Name))
	}
	if scope := slotctl.PatroniScope(ctx, conn); scope != "" && errors.Is(slotErr, slotctl.ErrSlotNotFound) {
		fmt.Fprintf(stderr, "slotctl create: warning: %s\n", slotctl.PatroniCreatedWarning(scope, slot.Name, slot.Database))
	}
	status := func(existed bool) string {
		if existed {
			return "already exists, verified"
		}
		return "created"
	}
	fmt.Fprintf(w, "publication %s: %s (inserts of %s)\n", cfg.Publication, status(pubErr == nil), info.Table)
	fmt.Fprintf(w, "slot %s: %s\n", cfg.Slot, status(slotErr == nil))
	writeSlotText(w, slot)
	return nil
}
