package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
)

const migrateUsageText = `Usage:
  walbox migrate-from-debezium --debezium-config FILE [--debezium-worker-config FILE]
      [--debezium-offsets FILE | --debezium-offsets-topic TOPIC] [--dry-run] [walbox run options]

Takes over the slot of a STOPPED Debezium Postgres connector (with the outbox
EventRouter) and runs like walbox run in Debezium mode, starting right after
the offset Kafka Connect stored for the connector: every event committed after
it is sent (Debezium's own at-least-once window again), none before.

The offset is read from Connect standalone's offsets file (--debezium-offsets;
default: offset.storage.file.filename of the worker configuration) or from a
distributed cluster's offsets topic (--debezium-offsets-topic; default:
offset.storage.topic of the worker configuration), under the connector's name
and topic.prefix.

walbox refuses, changing nothing, when the slot is missing or still in use, or
when the stored offset is from an unfinished snapshot. A slot confirmed past
the stored offset (Debezium confirms the slot before Connect stores the next
offset, so a killed Debezium leaves it ahead) is taken over from the slot's
position, with a warning: Debezium's events after it are sent again, at most
one offset flush interval of them.
Nothing is written before streaming: if walbox stops before it confirms a
position, running this command again plans the same start. Once walbox has
streamed, the takeover is done: start walbox run with the same options.

--dry-run prints the plan and exits.

Exit status: 0 after a clean stop (or a dry run), 1 on a fatal error, 2 for a
configuration problem or a refused takeover.
`

// migrateMain runs `walbox migrate-from-debezium`.
func migrateMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("walbox migrate-from-debezium", flag.ContinueOnError)
	offsetsFile := fs.String("debezium-offsets", "", "Connect standalone's offsets file (offset.storage.file.filename)")
	offsetsTopic := fs.String("debezium-offsets-topic", "", "a distributed Connect cluster's offsets topic (offset.storage.topic)")
	dryRun := fs.Bool("dry-run", false, "print the takeover plan and exit")
	cfg, err := config.Command{Name: "walbox migrate-from-debezium", Flags: fs}.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, migrateUsageText)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
		return exitUsage
	}
	if cfg.DebeziumConfig == "" {
		fmt.Fprintf(stderr, "walbox: migrate-from-debezium needs --debezium-config (WALBOX_DEBEZIUM_CONFIG): the connector's configuration names its offsets and its records\n")
		return exitUsage
	}
	if cfg.Delivery == pipeline.DeliveryExactlyOnce {
		// The takeover acknowledges the events Debezium already sent without
		// producing them, which a Kafka transaction cannot express; and the
		// state topic has no position yet, so nothing would be gained.
		fmt.Fprintf(stderr, "walbox: migrate-from-debezium runs with --delivery at-least-once (Debezium's own guarantee); once it has confirmed a position, stop it and start `walbox run --delivery exactly-once` on the same slot\n")
		return exitUsage
	}
	tr, err := cfg.DebeziumTranslation()
	if err != nil {
		fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
		return exitUsage
	}
	src, err := offsetSource(*offsetsFile, *offsetsTopic, tr)
	if err != nil {
		fmt.Fprintf(stderr, "walbox: %v\n", err)
		return exitUsage
	}
	setMemoryLimit(cfg, getenv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := newLogger(cfg, stderr)

	plan, err := planTakeover(ctx, cfg, tr, src, log)
	if err != nil {
		fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
		if errors.Is(err, debezium.ErrTakeover) || errors.Is(err, debezium.ErrOffsets) || errors.Is(err, debezium.ErrSlotActive) {
			return exitUsage
		}
		return exitFatal
	}
	if *dryRun {
		printPlan(stdout, cfg, tr, src, plan)
		return exitOK
	}
	var skipper *sentSkipper
	err = runRelayWith(ctx, cfg, log, runOptions{
		start: func(ctx context.Context, slot slotctl.SlotInfo) (pglogrepl.LSN, error) {
			// Planned again now that the slot is set up: nothing else may
			// have moved it in between, and if something did, the plan
			// says so.
			p, err := planTakeover(ctx, cfg, tr, src, log)
			if err != nil {
				return 0, err
			}
			log.Info("taking over Debezium's slot", "slot", cfg.Slot, "offset_lsn", p.Offset.LSN.String(), "offset_lsn_commit", p.Offset.LSNCommit.String(),
				"offset_txid", p.Offset.TxID, "slot_confirmed_lsn", p.SlotConfirmed.String(), "start_lsn", p.Start.String(),
				"resent_events", p.Resent, "skipped_events", p.Skipped, "why", p.Why)
			if p.SlotAhead {
				log.Warn("the slot is confirmed past Debezium's stored offset: starting from the slot", "slot", cfg.Slot,
					"slot_confirmed_lsn", p.SlotConfirmed.String(), "offset_lsn_commit", p.Offset.LSNCommit.String(), "why", p.Why)
			}
			if p.SkipXID != 0 {
				skipper = newSentSkipper(p.SkipXID, p.SkipUpTo, p.SkipAtUpTo)
			}
			return max(p.Start, slot.ConfirmedFlushLSN), nil
		},
		wrap: func(rt pipeline.Router, p pipeline.Producer) (pipeline.Router, pipeline.Producer) {
			if skipper == nil {
				return rt, p
			}
			return skipRouter{rt, skipper}, skipProducer{p, skipper}
		},
	})
	if skipper != nil {
		log.Info("events of Debezium's last transaction that it had sent were not sent again", "skipped", skipper.Skipped())
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
		if errors.Is(err, debezium.ErrTakeover) {
			return exitUsage
		}
		return exitFatal
	}
	return exitOK
}

// offsets names where Debezium's offsets are.
type offsets struct {
	file, topic string
}

func (o offsets) String() string {
	if o.file != "" {
		return "offsets file " + o.file
	}
	return "offsets topic " + o.topic
}

func offsetSource(file, topic string, tr *debezium.Translation) (offsets, error) {
	switch {
	case file != "" && topic != "":
		return offsets{}, errors.New("give either --debezium-offsets or --debezium-offsets-topic, not both")
	case file != "":
		return offsets{file: file}, nil
	case topic != "":
		return offsets{topic: topic}, nil
	case tr.OffsetsFile != "":
		return offsets{file: tr.OffsetsFile}, nil
	case tr.OffsetsTopic != "":
		return offsets{topic: tr.OffsetsTopic}, nil
	}
	return offsets{}, errors.New("no offsets: give --debezium-offsets FILE (Connect standalone's offset.storage.file.filename) or --debezium-offsets-topic TOPIC (offset.storage.topic), or a worker configuration with one of them")
}

// readOffset reads the connector's stored offset.
func readOffset(ctx context.Context, cfg config.Config, tr *debezium.Translation, src offsets) (debezium.Offset, error) {
	name, prefix := tr.Router.ConnectorName, tr.Router.LogicalName
	if name == "" {
		return debezium.Offset{}, fmt.Errorf("%w: the connector configuration has no name, which keys its offsets; add name=<the connector's name>", debezium.ErrOffsets)
	}
	var entries [][2][]byte
	var err error
	if src.file != "" {
		entries, err = debezium.ReadOffsetsFile(src.file)
		if errors.Is(err, debezium.ErrOffsetsTruncated) {
			// Connect would start with no offsets from this file; so does
			// the plan: from the slot's confirmed position.
			return debezium.Offset{}, nil
		}
	} else {
		kc, kerr := cfg.KafkaConfig()
		if kerr != nil {
			return debezium.Offset{}, kerr
		}
		opts := []kgo.Opt{kgo.SeedBrokers(kc.Brokers...), kgo.ClientID(kc.ClientID)}
		if kc.TLS != nil {
			opts = append(opts, kgo.DialTLSConfig(kc.TLS))
		}
		if kc.SASL != nil {
			opts = append(opts, kgo.SASL(kc.SASL))
		}
		tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		entries, err = debezium.ReadOffsetsTopic(tctx, opts, src.topic)
	}
	if err != nil {
		return debezium.Offset{}, err
	}
	return debezium.FindOffset(entries, name, prefix)
}

// planTakeover reads the offset and plans the start, waiting up to
// --slot-busy-timeout for a slot still held by Debezium's walsender.
func planTakeover(ctx context.Context, cfg config.Config, tr *debezium.Translation, src offsets, log *slog.Logger) (debezium.Plan, error) {
	off, err := readOffset(ctx, cfg, tr, src)
	if err != nil {
		return debezium.Plan{}, err
	}
	if off == (debezium.Offset{}) {
		log.Warn("Debezium's offsets file ends early (Connect was killed while writing it), so it holds no offset; "+
			"like Debezium, walbox starts from the slot's confirmed position and sends again what Debezium sent after it", "file", src.file)
	}
	cc, err := cfg.ConnConfig()
	if err != nil {
		return debezium.Plan{}, err
	}
	deadline := time.Now().Add(cfg.SlotBusyTimeout)
	for {
		plan, err := func() (debezium.Plan, error) {
			conn, err := pgx.ConnectConfig(ctx, cc)
			if err != nil {
				return debezium.Plan{}, fmt.Errorf("connect to postgres: %w", err)
			}
			defer conn.Close(context.Background())
			return debezium.PlanTakeover(ctx, conn, cfg.Slot, cfg.Publication, splitTables(cfg.Table), off)
		}()
		if !errors.Is(err, debezium.ErrSlotActive) || time.Now().After(deadline) {
			return plan, err
		}
		log.Warn("waiting for Debezium to release the slot", "slot", cfg.Slot, "err", err)
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return plan, ctx.Err()
		case <-t.C:
		}
	}
}

func printPlan(w io.Writer, cfg config.Config, tr *debezium.Translation, src offsets, p debezium.Plan) {
	fmt.Fprintf(w, "connector %q (topic.prefix %q), %s\n", tr.Router.ConnectorName, tr.Router.LogicalName, src)
	fmt.Fprintf(w, "stored offset: lsn %s, lsn_proc %s, lsn_commit %s, txId %d, messageType %q, lsn_events_processed %d\n",
		p.Offset.LSN, p.Offset.LSNProc, p.Offset.LSNCommit, p.Offset.TxID, p.Offset.MessageType, p.Offset.LSNEventsProcessed)
	fmt.Fprintf(w, "slot %s: confirmed_flush_lsn %s\n", cfg.Slot, p.SlotConfirmed)
	fmt.Fprintf(w, "walbox starts at %s: %s\n", p.Start, p.Why)
	if p.Skipped > 0 {
		fmt.Fprintf(w, "events of transaction %d that Debezium had sent, streamed but not sent again: %d (its inserts before %s and the first %d at it)\n",
			p.SkipXID, p.Skipped, p.SkipUpTo, p.SkipAtUpTo)
	}
	if p.Resent >= 0 {
		fmt.Fprintf(w, "events Debezium had sent that are sent again: %d (plus any it sent after storing the offset)\n", p.Resent)
	}
}

// splitTables splits --table's comma list.
func splitTables(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}
