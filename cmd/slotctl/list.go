package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/walbox/walbox/slotctl"
)

const listHelp = `Usage: slotctl list [--json] [--config FILE] [--pg-dsn DSN] [--slot NAME] [--publication NAME] [--replay-slot NAME] [--timeout D]

Lists every logical replication slot of the database: plugin, the server
process streaming from it and that client's address (pg_stat_replication),
confirmed_flush_lsn, restart_lsn, the WAL it holds back (retained), wal_status
and safe_wal_size (how much more WAL may be written before the slot risks
losing WAL it needs; "-" when max_slot_wal_keep_size is unlimited). walbox's
slots are marked: the slot named by --slot ("live") and its trailing replay
slot ("replay": --replay-slot, default "<slot>_replay"), with the publication
they stream (--publication) and its tables. A pgoutput slot named
"<name>_replay" whose slot <name> no longer exists is marked "orphan": a
trailing slot left behind by a rollback to the polling relay, a cutover to
a new slot or a --slot rename. Nothing advances it, so it holds WAL until
you drop it (slotctl drop --slot NAME). A trailing slot walbox cannot have
made (a client decoded it, or it is ahead of the live slot) is said so:
walbox run refuses to keep it. Changes nothing.

  --json   print JSON: {"slots": [{...}, ...]}
`

// listOptions are the flags of `slotctl list`.
type listOptions struct {
	commonOptions
	JSON bool
}

// listReport is what list prints; its JSON form is part of the CLI's
// interface.
type listReport struct {
	Slots []listedSlotJSON `json:"slots"`
}

type listedSlotJSON struct {
	slotJSON
	RetainedHuman   string `json:"retained"` // e.g. "16.0 MiB"
	ClientAddr      string `json:"client_addr"`
	ApplicationName string `json:"application_name"`
	// SafeWALSize is null when max_slot_wal_keep_size is -1 (no limit).
	SafeWALSize *int64 `json:"safe_wal_size"`
	// Walbox is "live" or "replay" for walbox's slots, "orphan" for a
	// trailing slot whose live slot is gone, "" otherwise.
	Walbox string `json:"walbox"`
	// Trails is the live slot a "replay" or "orphan" slot trails.
	Trails string `json:"trails,omitempty"`
	// NotTrailing says why a "replay" or "orphan" slot is not one walbox
	// made.
	NotTrailing string           `json:"not_trailing,omitempty"`
	Publication *publicationJSON `json:"publication"`
}

func runList(ctx context.Context, args []string, e env) error {
	var o listOptions
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.BoolVar(&o.JSON, "json", false, "")
	if err := o.load(o.command("list", fs, append(connOptions, "replay-slot")), args, e, listHelp); err != nil {
		return err
	}
	cfg := o.slotConfig(false)
	cfg.ReplaySlot = o.cfg.ReplaySlotName()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	slots, err := slotctl.List(ctx, conn, cfg)
	if err != nil {
		return err
	}
	r := listReport{Slots: []listedSlotJSON{}}
	for _, s := range slots {
		l := listedSlotJSON{
			slotJSON:      *newSlotJSON(s.SlotInfo),
			RetainedHuman: bytesIEC(s.RetainedBytes),
			ClientAddr:    s.ClientAddr, ApplicationName: s.ApplicationName,
			SafeWALSize: s.SafeWALSize, Walbox: s.Role, Trails: s.Trails, NotTrailing: s.NotTrailing,
		}
		if s.Publication != nil {
			l.Publication = newPublicationJSON(*s.Publication)
		}
		r.Slots = append(r.Slots, l)
	}
	if o.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.writeText(e.stdout, cfg)
	return nil
}

func (r listReport) writeText(w io.Writer, cfg slotctl.Config) {
	if len(r.Slots) == 0 {
		fmt.Fprintln(w, "no logical replication slots in this database")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPLUGIN\tACTIVE PID\tCLIENT\tCONFIRMED\tRESTART\tRETAINED\tWAL_STATUS\tSAFE_WAL_SIZE\tWALBOX")
	for _, s := range r.Slots {
		pid, client := "-", "-"
		if s.Active {
			pid, client = strconv.Itoa(s.ActivePID), orDash(s.ClientAddr)
		}
		safe := "-"
		if s.SafeWALSize != nil {
			safe = bytesIEC(*s.SafeWALSize)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s (%d bytes)\t%s\t%s\t%s\n",
			s.Name, orDash(s.Plugin), pid, client, s.ConfirmedFlushLSN, s.RestartLSN,
			s.RetainedHuman, s.RetainedBytes, orDash(s.WALStatus), safe, orDash(s.Walbox))
	}
	tw.Flush()
	for _, s := range r.Slots {
		if s.Walbox == "" {
			continue
		}
		if s.NotTrailing != "" {
			fmt.Fprintf(w, "slot %s is named as a trailing slot of %s but is not one walbox made: %s\n", s.Name, s.Trails, s.NotTrailing)
		}
		if s.Walbox == slotctl.RoleOrphan {
			fmt.Fprintf(w, "orphaned trailing slot %s: its live slot %s no longer exists, so nothing advances it and it holds %s of WAL until dropped; "+
				"if you no longer need to replay from it: slotctl drop --slot %s\n", s.Name, s.Trails, s.RetainedHuman, s.Name)
			continue
		}
		what := "walbox's slot"
		if s.Walbox == slotctl.RoleReplay {
			what = "walbox's trailing replay slot"
		}
		if s.Publication == nil {
			fmt.Fprintf(w, "%s %s: publication %s not found\n", what, s.Name, cfg.Publication)
			continue
		}
		fmt.Fprintf(w, "%s %s: publication %s, tables %s\n", what, s.Name, s.Publication.Name,
			orNone(strings.Join(s.Publication.Tables, ", ")))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
