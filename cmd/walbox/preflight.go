package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// The preflight is the one check of the server that `walbox run` makes on
// start and `walbox config check --connect` makes alone, so that the two
// cannot disagree: the same slotctl configuration (runSlotctlConfig), the
// same column checker, the same slotctl.Check (which slotctl.Ensure runs
// too before it creates anything), and the same names for each problem's
// option (config.ServerProblems).

// serverReport is what the preflight found.
type serverReport struct {
	plan slotctl.Plan
	// notes say what walbox run will do on start that is not a problem:
	// create the publication and the slot on a first start.
	notes []string
	// problems are what walbox run refuses, each naming its option (flag,
	// environment variable, YAML key) where one fixes it.
	problems []error
}

// runSlotctlConfig is the slotctl configuration of `walbox run`: a missing
// slot is created on a first start, or with --create-slot; cols checks the
// outbox tables' columns (walbox's router, or Debezium's EventRouter), and
// policy, when set, applies Debezium's publication.autocreate.mode.
func runSlotctlConfig(cfg config.Config, cols slotctl.ColumnChecker, policy func(*slotctl.Config)) slotctl.Config {
	scfg := cfg.SlotctlConfig()
	scfg.CreateMissing = cfg.CreateSlot
	scfg.CreateOnFirstStart = true
	scfg.Columns = cols
	if policy != nil {
		policy(&scfg)
	}
	return scfg
}

// checkServer runs the preflight on conn, an ordinary session, changing
// nothing. err is a failure that stopped it (the connection); problems
// are in the report.
func checkServer(ctx context.Context, conn *pgx.Conn, cfg config.Config) (serverReport, error) {
	var rep serverReport
	var (
		cols   slotctl.ColumnChecker
		policy func(*slotctl.Config)
	)
	if cfg.DebeziumConfig != "" {
		d, err := newDebeziumMode(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			return rep, err
		}
		cols, policy = d.check, func(s *slotctl.Config) { config.DebeziumSlotPolicy(d.tr, s) }
	} else {
		rt, err := router.New(cfg.RouterConfig())
		if err != nil {
			return rep, err
		}
		cols = rt
	}
	scfg := runSlotctlConfig(cfg, cols, policy)
	pub, slot := scfg.WithDefaults().Publication, scfg.WithDefaults().Slot

	var problems []error
	if cfg.MessagePrefix != "" {
		// slotctl.Setup's check before it creates anything.
		err := slotctl.CheckEmitMessagePrivilege(ctx, conn)
		switch {
		case errors.Is(err, slotctl.ErrEmitMessagePublic) && !cfg.MessagePrefixAllowPublic:
			problems = append(problems, fmt.Errorf("%w (to start anyway, accepting that any role may forge events, pass --message-prefix-allow-public)", err))
		case err != nil && !errors.Is(err, slotctl.ErrEmitMessagePublic):
			return rep, err
		}
	}
	// An unfinished takeover snapshot (setupSlotOrTakeover): without
	// --snapshot walbox run stops on it alone; with --snapshot it drops and
	// creates the slot again, so a missing one is no problem.
	pending, err := snapshot.Pending(ctx, cfg.PGDSN, pub, slot)
	if err != nil {
		return rep, err
	}
	takeover := cfg.SnapshotConfig().Mode != snapshot.ModeNone
	switch {
	case pending && !takeover:
		rep.problems = cfg.ServerProblems(errors.Join(append(problems, snapshot.PendingError(pub, slot))...))
		return rep, nil
	case pending:
		scfg.CreateMissing = true
	}

	rep.plan, err = slotctl.Check(ctx, conn, scfg)
	for _, e := range config.Split(err) {
		if !isServerProblem(e) {
			return rep, err // the connection failed, or a check could not run
		}
		problems = append(problems, e)
	}
	rep.problems = cfg.ServerProblems(errors.Join(problems...))

	if len(rep.problems) > 0 {
		return rep, nil // what walbox run would create is moot until they are fixed
	}
	snap := ""
	if takeover {
		snap = fmt.Sprintf(", and send the outbox rows --snapshot %s selects from its snapshot before streaming", cfg.Snapshot)
	}
	switch p := rep.plan; {
	case p.CreatePublication && p.CreateSlot:
		rep.notes = append(rep.notes, fmt.Sprintf("walbox run will create publication %q and slot %q on its first start%s; "+
			"the slot streams what commits after its creation", pub, slot, snap))
	case p.CreatePublication:
		rep.notes = append(rep.notes, fmt.Sprintf("walbox run will create publication %q", pub))
	case p.CreateSlot && cfg.CreateSlot:
		rep.notes = append(rep.notes, fmt.Sprintf("walbox run will create slot %q because of --create-slot%s; "+
			"it streams only what commits after its creation", slot, snap))
	case p.CreateSlot:
		rep.notes = append(rep.notes, fmt.Sprintf("walbox run will create slot %q, finishing a first start that stopped after creating publication %q%s", slot, pub, snap))
	}
	return rep, nil
}

// isServerProblem tells a problem the preflight found (it wraps a
// sentinel of its owner) from a failure that stopped it.
func isServerProblem(err error) bool {
	for _, s := range []error{
		slotctl.ErrUnsupportedVersion, slotctl.ErrWALLevel, slotctl.ErrNoReplicationPrivilege, slotctl.ErrNoReplicationSlots,
		slotctl.ErrTableNotFound, slotctl.ErrTableNotReadable,
		slotctl.ErrPublicationNotFound, slotctl.ErrPublicationMismatch, slotctl.ErrPublicationPrivilege,
		slotctl.ErrSlotNotFound, slotctl.ErrSlotMismatch, slotctl.ErrSlotLost, slotctl.ErrSlotVanished,
		slotctl.ErrEmitMessagePublic, router.ErrInvalidConfig, snapshot.ErrSnapshotPending,
	} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// preflightTimeout bounds walbox run's preflight; a server that does not
// answer in time is left to the start's own retries.
const preflightTimeout = 15 * time.Second

// preflightRun is walbox run's preflight before anything starts: when the
// server is reachable and refuses the configuration, it prints every
// problem on one line and returns exitUsage and true. When the server
// cannot be reached it returns false: the start retries until it can, and
// makes the same checks (slotctl.Ensure runs slotctl.Check).
func preflightRun(ctx context.Context, cfg config.Config, stderr io.Writer) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	cc, err := cfg.ConnConfig()
	if err != nil {
		return 0, false // Load has reported it
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return 0, false
	}
	defer conn.Close(context.Background())
	rep, err := checkServer(ctx, conn, cfg)
	if err != nil || len(rep.problems) == 0 {
		return 0, false
	}
	texts := make([]string, len(rep.problems))
	for i, p := range rep.problems {
		texts[i] = p.Error()
	}
	fmt.Fprintf(stderr, "walbox: %s\n", oneLine(errors.New(cfg.Scrub(strings.Join(texts, "; ")))))
	return exitUsage, true
}
