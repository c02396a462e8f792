package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/walbox/walbox/slotctl"
)

const dropHelp = `Usage: slotctl drop [--publication-too] [--replay-slot-too] [--yes] [--config FILE] [--pg-dsn DSN] [--slot NAME] [--publication NAME] [--replay-slot NAME] [--timeout D]

Drops the replication slot, and with --publication-too the publication.
Dropping the slot discards its position: outbox rows committed after its
confirmed_flush_lsn that walbox has not published yet are not sent by a new
slot; publish them again from the outbox table. Before asking, it warns how
many such events there are (what walbox routes: inserts into the outbox
tables and, with --message-prefix, that prefix's transactional messages;
counted on a temporary copy of the slot; "could not count" if that fails) and how much WAL the slot holds. Refuses (exit 3)
while a process streams from the slot.

  --publication-too   also drop the publication (after the slot)
  --replay-slot-too   also drop the slot's trailing replay slot (--replay-slot,
                      default <slot>_replay), after the slot. Without it,
                      drop names the trailing slot it leaves behind: once the
                      live slot is gone nothing advances it, and it holds WAL
                      until dropped. A slot of that name walbox did not make
                      (see slotctl list) is not dropped.
  --yes               do not ask; required when stdin is not a terminal

On a terminal, asks you to type the slot's name (the publication's when only
it exists). Something that does not exist is reported on stderr; it is an
error only when nothing at all exists to drop.
`

// dropOptions are the flags of `slotctl drop`.
type dropOptions struct {
	commonOptions
	PublicationToo bool
	ReplaySlotToo  bool
	Yes            bool
}

func runDrop(ctx context.Context, args []string, e env) error {
	var o dropOptions
	fs := flag.NewFlagSet("drop", flag.ContinueOnError)
	fs.BoolVar(&o.PublicationToo, "publication-too", false, "")
	fs.BoolVar(&o.ReplaySlotToo, "replay-slot-too", false, "")
	fs.BoolVar(&o.Yes, "yes", false, "")
	if err := o.load(o.command("drop", fs, connOptions, countOptions, []string{"replay-slot"}), args, e, dropHelp); err != nil {
		return err
	}
	cfg := o.slotConfig(false)
	if !o.Yes && !e.stdinIsTTY {
		return usageError{"refusing to drop without --yes: stdin is not a terminal, so there is no one to confirm"}
	}

	// The timeout bounds the database work, not the time a human takes to
	// answer, so the lookups and the drops get their own contexts.
	lookCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(lookCtx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	var missing []string
	slot, err := slotctl.Inspect(lookCtx, conn, cfg.Slot)
	slotFound := err == nil
	switch {
	case errors.Is(err, slotctl.ErrSlotNotFound):
		missing = append(missing, fmt.Sprintf("slot %q does not exist", cfg.Slot))
	case err != nil:
		return err
	case slot.Active:
		return fmt.Errorf("%w: slot %q is streaming to server process %d; stop the walbox (or other consumer) using it first, "+
			"or end that session with SELECT pg_terminate_backend(%d); nothing was dropped",
			slotctl.ErrSlotActive, slot.Name, slot.ActivePID, slot.ActivePID)
	}
	pubFound := false
	if o.PublicationToo {
		_, err := slotctl.InspectPublication(lookCtx, conn, cfg.Publication)
		pubFound = err == nil
		switch {
		case errors.Is(err, slotctl.ErrPublicationNotFound):
			missing = append(missing, fmt.Sprintf("publication %q does not exist", cfg.Publication))
		case err != nil:
			return err
		}
	}
	var trailing *slotctl.SlotInfo
	if slotFound {
		if trailing, err = o.trailingToDrop(lookCtx, e, conn, slot); err != nil {
			return err
		}
	}
	if !slotFound && !pubFound {
		return fmt.Errorf("nothing to drop: %s in this database", strings.Join(missing, ", and "))
	}
	for _, m := range missing {
		fmt.Fprintf(e.stderr, "slotctl drop: %s; skipping it\n", m)
	}
	if slotFound {
		warnUnconfirmed(ctx, e, &o.commonOptions, slot)
	}

	if !o.Yes {
		var b strings.Builder
		fmt.Fprintln(&b, "This drops:")
		word := cfg.Publication
		if slotFound {
			word = slot.Name
			fmt.Fprintf(&b, "  - replication slot %q of database %q, confirmed up to %s, holding %s of WAL\n",
				slot.Name, slot.Database, slot.ConfirmedFlushLSN, bytesIEC(slot.RetainedBytes))
			fmt.Fprintf(&b, "    Outbox rows committed after %s and not yet published will not be sent by a new slot.\n",
				slot.ConfirmedFlushLSN)
		}
		if trailing != nil {
			fmt.Fprintf(&b, "  - its trailing replay slot %q, holding %s of WAL: events in its window can no longer be replayed\n",
				trailing.Name, bytesIEC(trailing.RetainedBytes))
		}
		if pubFound {
			fmt.Fprintf(&b, "  - publication %q\n", cfg.Publication)
		}
		fmt.Fprintf(&b, "Type %q to confirm: ", word)
		if err := confirm(ctx, e, b.String(), word); err != nil {
			return err
		}
	}

	dropCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if slotFound {
		if err := slotctl.DropSlot(dropCtx, conn, slot.Name); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "dropped slot %s\n", slot.Name)
	}
	if trailing != nil {
		if err := slotctl.DropSlot(dropCtx, conn, trailing.Name); err != nil {
			return fmt.Errorf("slot %s was dropped, but not its trailing slot: %w", slot.Name, err)
		}
		fmt.Fprintf(e.stdout, "dropped slot %s\n", trailing.Name)
	}
	if pubFound {
		if err := slotctl.DropPublication(dropCtx, conn, cfg.Publication); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "dropped publication %s\n", cfg.Publication)
	}
	return nil
}

// warnUnconfirmed says on stderr how many events dropping slot discards
// (what walbox routes after its confirmed position, counted on a
// temporary copy) and how much WAL it holds.
func warnUnconfirmed(ctx context.Context, e env, o *commonOptions, slot slotctl.SlotInfo) {
	wal := fmt.Sprintf("%s (%d bytes) of WAL", bytesIEC(slot.RetainedBytes), slot.RetainedBytes)
	n, err := o.countEvents(ctx, slot.Name, 0)
	if err != nil {
		fmt.Fprintf(e.stderr, "slotctl drop: warning: slot %q holds %s; could not count its unconfirmed outbox events (%s); dropping it discards them\n",
			slot.Name, wal, countFailure(err))
		return
	}
	fmt.Fprintf(e.stderr, "slotctl drop: warning: slot %q holds %d unconfirmed outbox event(s) after %s (%s) and %s; dropping it discards them\n",
		slot.Name, n, slot.ConfirmedFlushLSN, o.events(), wal)
}

// trailingToDrop looks for the trailing replay slot of the live slot
// about to be dropped. Without --replay-slot-too it says on stderr that
// the drop leaves it behind, holding WAL, and returns nil; with it, it
// returns the slot to drop, unless it is active or not walbox's (said on
// stderr, nil).
func (o *dropOptions) trailingToDrop(ctx context.Context, e env, conn slotctl.Querier, live slotctl.SlotInfo) (*slotctl.SlotInfo, error) {
	name := o.cfg.ReplaySlotName()
	if name == live.Name {
		return nil, nil
	}
	tr, err := slotctl.Inspect(ctx, conn, name)
	switch {
	case errors.Is(err, slotctl.ErrSlotNotFound):
		if o.ReplaySlotToo {
			fmt.Fprintf(e.stderr, "slotctl drop: slot %q has no trailing replay slot %q; skipping it\n", live.Name, name)
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	if err := slotctl.CheckTrailing(ctx, conn, live.Name, name); err != nil {
		if !errors.Is(err, slotctl.ErrNotTrailing) {
			return nil, err
		}
		if o.ReplaySlotToo {
			fmt.Fprintf(e.stderr, "slotctl drop: not dropping slot %q: %s\n", name, strings.TrimPrefix(err.Error(), "slotctl: "))
		}
		return nil, nil
	}
	if !o.ReplaySlotToo {
		fmt.Fprintf(e.stderr, "slotctl drop: warning: slot %q has the trailing replay slot %q (holding %s of WAL); once %q is gone nothing advances it "+
			"and it holds WAL until dropped: drop it too with --replay-slot-too, or later with `slotctl drop --slot %s`\n",
			live.Name, name, bytesIEC(tr.RetainedBytes), live.Name, name)
		return nil, nil
	}
	if tr.Active {
		return nil, fmt.Errorf("%w: trailing slot %q is streaming to server process %d; stop that process first, "+
			"or drop %q without --replay-slot-too; nothing was dropped", slotctl.ErrSlotActive, name, tr.ActivePID, live.Name)
	}
	return &tr, nil
}
