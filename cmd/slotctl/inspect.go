package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/slotctl"
)

const inspectHelp = `Usage: slotctl inspect [--json] [--config FILE] [--pg-dsn DSN] [--table schema.table] [--slot NAME] [--publication NAME] [--timeout D]

Prints the replication slot (plugin, database, whether a process streams from
it, confirmed_flush_lsn, restart_lsn, wal_status, WAL it holds back), the
publication with its tables, and every problem the checks of 'slotctl create'
find. Changes nothing. Exits 1 if the slot or the publication is missing or a
problem was found.

  --json   print JSON: {"slot": {...} or null, "publication": {...} or null, "problems": [...]}
`

// inspectOptions are the flags of `slotctl inspect`.
type inspectOptions struct {
	commonOptions
	JSON bool
}

func runInspect(ctx context.Context, args []string, e env) error {
	var o inspectOptions
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.BoolVar(&o.JSON, "json", false, "")
	if err := o.load(o.command("inspect", fs, connOptions), args, e, inspectHelp); err != nil {
		return err
	}
	cfg := o.slotConfig(false)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	r, err := inspect(ctx, conn, cfg)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.writeText(e.stdout, cfg)
	}
	if n := len(r.Problems); n > 0 {
		return fmt.Errorf("%d problem(s) found", n)
	}
	return nil
}

// report is what inspect prints; its JSON form is part of the CLI's
// interface.
type report struct {
	Slot        *slotJSON        `json:"slot"`
	Publication *publicationJSON `json:"publication"`
	Problems    []string         `json:"problems"`
}

type slotJSON struct {
	Name              string `json:"name"`
	Plugin            string `json:"plugin"`
	SlotType          string `json:"slot_type"`
	Database          string `json:"database"`
	Temporary         bool   `json:"temporary"`
	Active            bool   `json:"active"`
	ActivePID         int    `json:"active_pid"`
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn"` // e.g. "0/16B3748"
	RestartLSN        string `json:"restart_lsn"`
	WALStatus         string `json:"wal_status"`
	RetainedBytes     int64  `json:"retained_bytes"`
	// InvalidationReason is set (PostgreSQL 17+) once the server gave up
	// the slot.
	InvalidationReason string `json:"invalidation_reason,omitempty"`
}

type publicationJSON struct {
	Name      string   `json:"name"`
	Owner     string   `json:"owner"`
	AllTables bool     `json:"all_tables"`
	Publishes []string `json:"publishes"` // insert, update, delete, truncate
	ViaRoot   bool     `json:"publish_via_partition_root"`
	Tables    []string `json:"tables"` // schema.table
}

func newSlotJSON(s slotctl.SlotInfo) *slotJSON {
	return &slotJSON{
		Name: s.Name, Plugin: s.Plugin, SlotType: s.SlotType, Database: s.Database,
		Temporary: s.Temporary, Active: s.Active, ActivePID: s.ActivePID,
		ConfirmedFlushLSN: s.ConfirmedFlushLSN.String(), RestartLSN: s.RestartLSN.String(),
		WALStatus: s.WALStatus, RetainedBytes: s.RetainedBytes, InvalidationReason: s.InvalidationReason,
	}
}

func newPublicationJSON(p slotctl.PublicationInfo) *publicationJSON {
	out := &publicationJSON{Name: p.Name, Owner: p.Owner, AllTables: p.AllTables, ViaRoot: p.ViaRoot,
		Publishes: []string{}, Tables: []string{}}
	for _, op := range []struct {
		on   bool
		name string
	}{{p.Insert, "insert"}, {p.Update, "update"}, {p.Delete, "delete"}, {p.Truncate, "truncate"}} {
		if op.on {
			out.Publishes = append(out.Publishes, op.name)
		}
	}
	for _, t := range p.Tables {
		out.Tables = append(out.Tables, t.String())
	}
	return out
}

// inspect reads the slot and publication and runs the checks of create
// without creating anything. Only a failure to query is an error; what is
// missing or wrong goes into Problems.
func inspect(ctx context.Context, conn *pgx.Conn, cfg slotctl.Config) (report, error) {
	r := report{Problems: []string{}}
	addProblem := func(err error) {
		// Preflight joins its findings with newlines: one problem each.
		for _, p := range strings.Split(err.Error(), "\n") {
			p = strings.TrimPrefix(p, "slotctl: ")
			if !slices.Contains(r.Problems, p) {
				r.Problems = append(r.Problems, p)
			}
		}
	}

	slot, err := slotctl.Inspect(ctx, conn, cfg.Slot)
	switch {
	case errors.Is(err, slotctl.ErrSlotNotFound):
		addProblem(err)
	case err != nil:
		return r, err
	default:
		r.Slot = newSlotJSON(slot)
	}
	pub, err := slotctl.InspectPublication(ctx, conn, cfg.Publication)
	switch {
	case errors.Is(err, slotctl.ErrPublicationNotFound):
		addProblem(err)
	case err != nil:
		return r, err
	default:
		r.Publication = newPublicationJSON(pub)
	}

	if _, err := slotctl.Preflight(ctx, conn, cfg); err != nil {
		addProblem(err)
	}
	if r.Publication != nil {
		if err := slotctl.EnsurePublication(ctx, conn, cfg); err != nil {
			addProblem(err)
		}
	}
	if r.Slot != nil {
		if _, err := slotctl.EnsureSlot(ctx, conn, cfg); err != nil {
			addProblem(err)
		}
		if slot.WALStatus == "unreserved" {
			addProblem(fmt.Errorf("slot %q has wal_status = unreserved: the next checkpoint may remove WAL it needs "+
				"(it holds %s); start walbox so it catches up, or raise max_slot_wal_keep_size", slot.Name, bytesIEC(slot.RetainedBytes)))
		}
	}
	return r, nil
}

func (r report) writeText(w io.Writer, cfg slotctl.Config) {
	if r.Slot == nil {
		fmt.Fprintf(w, "slot %s: not found\n", cfg.Slot)
	} else {
		fmt.Fprintf(w, "slot %s\n", r.Slot.Name)
		writeSlotFields(w, r.Slot)
	}
	if r.Publication == nil {
		fmt.Fprintf(w, "publication %s: not found\n", cfg.Publication)
	} else {
		p := r.Publication
		fmt.Fprintf(w, "publication %s\n", p.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		fmt.Fprintf(tw, "  owner:\t%s\n", p.Owner)
		fmt.Fprintf(tw, "  publishes:\t%s\n", orNone(strings.Join(p.Publishes, ", ")))
		if p.AllTables {
			fmt.Fprintf(tw, "  all_tables:\tyes\n")
		}
		fmt.Fprintf(tw, "  via_partition_root:\t%s\n", yesNo(p.ViaRoot))
		fmt.Fprintf(tw, "  tables:\t%s\n", orNone(strings.Join(p.Tables, ", ")))
		tw.Flush()
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "problems: none")
		return
	}
	fmt.Fprintln(w, "problems:")
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// writeSlotText prints a slot as create and inspect show it.
func writeSlotText(w io.Writer, s slotctl.SlotInfo) { writeSlotFields(w, newSlotJSON(s)) }

func writeSlotFields(w io.Writer, s *slotJSON) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "  plugin:\t%s\n", orNone(s.Plugin))
	fmt.Fprintf(tw, "  type:\t%s\n", s.SlotType)
	fmt.Fprintf(tw, "  database:\t%s\n", orNone(s.Database))
	if s.Active {
		fmt.Fprintf(tw, "  active:\tyes, server process %d\n", s.ActivePID)
	} else {
		fmt.Fprintf(tw, "  active:\tno\n")
	}
	if s.Temporary {
		fmt.Fprintf(tw, "  temporary:\tyes\n")
	}
	fmt.Fprintf(tw, "  confirmed_flush_lsn:\t%s\n", s.ConfirmedFlushLSN)
	fmt.Fprintf(tw, "  restart_lsn:\t%s\n", s.RestartLSN)
	fmt.Fprintf(tw, "  wal_status:\t%s\n", orNone(s.WALStatus))
	if s.InvalidationReason != "" {
		fmt.Fprintf(tw, "  invalidation_reason:\t%s\n", s.InvalidationReason)
	}
	fmt.Fprintf(tw, "  retained_wal:\t%s (%d bytes)\n", bytesIEC(s.RetainedBytes), s.RetainedBytes)
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
