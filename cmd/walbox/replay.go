package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/tracing/otlp"
)

const replayHelp = `Usage: walbox replay --from LSN|TIME [--to LSN|TIME] [--topic TEMPLATE] [--dry-run] [options of walbox run]

Produces again the outbox events of every transaction that committed in the
range, from the trailing slot that 'walbox run --replay-window' keeps
(--replay-slot, default <slot>_replay). The trailing slot is copied into a
temporary slot that lives only as long as this command's connection; neither
the live slot nor the trailing one is moved, and nothing is left behind, even
if the command is killed.

  --from LSN|TIME   first commit to replay (inclusive): a commit LSN such as
                    16/B374D848, or an RFC 3339 time such as
                    2026-11-30T22:00:00Z compared with the commit time
  --to LSN|TIME     last commit to replay (inclusive); default and upper
                    limit: the server's WAL position when the replay starts

LSNs are exact. Times are compared with commit times, which do not follow
WAL order (a commit timestamp is taken before the commit record is written),
so a TIME --to reads on to the server's position at start, and a TIME range
replays exactly the transactions the trailing slot holds whose commit time
is in it; a transaction whose commit record precedes the trailing slot's
position is never replayed, even if its commit time is after --from. Give
LSNs for an exact range (refusals name the LSN to use).
  --topic TEMPLATE  send every record to this topic template (placeholders
                    as for walbox run's --topic; a --column-topic is then
                    ignored) instead of its usual topic
  --dry-run         count the events per topic, send nothing

Records carry their usual key, value and headers plus the header
walbox_replay: true. Prints per topic how many events were sent (stdout) once
Kafka acknowledged them all, and progress on stderr every 5s. Exit codes: 0
done, 1 error or refused range, 2 usage or configuration error.
`

// replayOptions are the flags of walbox replay besides walbox run's.
type replayOptions struct {
	From, To string
	DryRun   bool
	Table    tableOptions // --from-table and its selection (replay_table.go)
}

// replayMain runs `walbox replay` and returns its exit code.
func replayMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o replayOptions
	fs := flag.NewFlagSet("walbox replay", flag.ContinueOnError)
	fs.StringVar(&o.From, "from", "", "")
	fs.StringVar(&o.To, "to", "", "")
	fs.BoolVar(&o.DryRun, "dry-run", false, "")
	fs.BoolVar(&o.Table.FromTable, "from-table", false, "")
	fs.StringVar(&o.Table.Where, "where", "", "")
	fs.StringVar(&o.Table.FromID, "from-id", "", "")
	fs.StringVar(&o.Table.ToID, "to-id", "", "")
	cmd := config.Command{Name: "walbox replay", Flags: fs}
	cfg, err := cmd.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, replayHelp)
		fmt.Fprint(stdout, tableReplayHelp)
		fmt.Fprint(stdout, "\nOptions shared with walbox run (flag, environment variable, key of the --config file):\n")
		cmd.WriteOptions(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
		return exitUsage
	}
	// --topic on this command line sends every record there; from the
	// environment or the file it is the usual routing.
	topicGiven := false
	fs.Visit(func(f *flag.Flag) { topicGiven = topicGiven || f.Name == "topic" })
	var rg pipeline.Range
	err = o.Table.check(o.From, o.To)
	if err == nil && !o.Table.FromTable {
		rg, err = o.parseRange()
	}
	if err == nil {
		err = retention.Validate(0, cfg.Slot, cfg.ReplaySlot)
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rt, code := replayRouter(ctx, cfg, topicGiven, stderr)
	if rt == nil {
		return code
	}
	if o.Table.FromTable {
		err = runTableReplay(ctx, cfg, o.Table, o.DryRun, rt, stdout, stderr)
	} else {
		err = runReplay(ctx, cfg, o, rg, rt, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
		return exitFatal
	}
	return exitOK
}

// parseRange reads --from and --to; both must parse, --from is required
// and --to must not be before --from when both are of one kind.
func (o replayOptions) parseRange() (pipeline.Range, error) {
	var rg pipeline.Range
	if o.From == "" {
		return rg, errors.New("--from is required: a commit LSN such as 16/B374D848 or an RFC 3339 time such as 2026-11-30T22:00:00Z")
	}
	var err error
	if rg.FromLSN, rg.FromTime, err = pipeline.ParseReplayBound(o.From); err != nil {
		return rg, fmt.Errorf("--from: %w", err)
	}
	if rg.FromLSN == 0 && rg.FromTime.IsZero() {
		rg.FromLSN = 1 // 0/0: from the very beginning, which is still a bound to check
	}
	if o.To != "" {
		if rg.ToLSN, rg.ToTime, err = pipeline.ParseReplayBound(o.To); err != nil {
			return rg, fmt.Errorf("--to: %w", err)
		}
		if rg.ToLSN == 0 && rg.ToTime.IsZero() {
			return rg, errors.New("--to 0/0 selects nothing")
		}
	}
	if rg.ToLSN != 0 && rg.FromLSN > rg.ToLSN || !rg.ToTime.IsZero() && rg.ToTime.Before(rg.FromTime) {
		return rg, fmt.Errorf("--to %s is before --from %s", o.To, o.From)
	}
	return rg, nil
}

// replayRouter is the router of the replayed records: walbox's own, or in
// Debezium mode (--debezium-config) the EventRouter, so that a replay sends
// the records the live stream sent. On failure it has reported why and
// returns the exit code.
func replayRouter(ctx context.Context, cfg config.Config, topicGiven bool, stderr io.Writer) (pipeline.Router, int) {
	if cfg.DebeziumConfig != "" {
		log := newLogger(cfg, stderr)
		d, err := newDebeziumMode(cfg, log)
		if err != nil {
			fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
			return nil, exitUsage
		}
		rt, err := d.router(ctx, cfg, log)
		if err != nil {
			fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
			return nil, exitFatal
		}
		return rt, exitOK
	}
	rcfg := cfg.RouterConfig()
	if topicGiven {
		rcfg.Columns.Topic = ""
	}
	// A replay encodes values as walbox run does (its metrics are not
	// served).
	rcfg, err := withValueEncoder(cfg, rcfg, nil)
	if err != nil {
		fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
		return nil, exitUsage
	}
	rt, err := router.New(rcfg)
	if err != nil {
		fmt.Fprintf(stderr, "walbox replay: %v\n", oneLine(err))
		return nil, exitUsage
	}
	return rt, exitOK
}

func runReplay(ctx context.Context, cfg config.Config, o replayOptions, rg pipeline.Range, rt pipeline.Router, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	if cfg.MessagePrefix != "" {
		// A replay routes the messages in its range as `walbox run` does:
		// the same forgery guard.
		if _, err := setupCheckEmit(ctx, cfg, log); err != nil {
			return err
		}
	}
	pcfg := cfg.PipelineConfig()
	tracer, err := otlp.New(ctx, cfg.TracingConfig(), nil, log, nil)
	if err != nil {
		return err
	}
	defer shutdownTracer(tracer, log)
	rcfg := pipeline.ReplayConfig{
		Tracer:         tracer,
		ConnString:     cfg.PGDSN,
		Publication:    cfg.Publication,
		Slot:           cfg.ReplaySlotName(),
		Tables:         pcfg.Tables,
		MessagePrefix:  cfg.MessagePrefix,
		Range:          rg,
		From:           o.From,
		DryRun:         o.DryRun,
		ReceiveTimeout: cfg.PGReceiveTimeout,
		StatusInterval: cfg.StatusInterval,
		Progress:       func(p pipeline.ReplayProgress) { writeProgress(stderr, p) },
		// Large transactions in the range stream, as in walbox run.
		DisableStreaming: pcfg.DisableStreaming,
		SpoolDir:         pcfg.SpoolDir,
		SpoolMaxBytes:    pcfg.SpoolMaxBytes,
	}
	producer, closeProducer, err := replayProducer(ctx, cfg, o.DryRun, log)
	if err != nil {
		return err
	}
	defer closeProducer()
	res, err := pipeline.Replay(ctx, rcfg, producer, rt, log)
	if err != nil {
		if n := res.Events(); n > 0 {
			writeCounts(stdout, res, o.DryRun)
			return fmt.Errorf("%w (the counts above are the events Kafka acknowledged before the failure)", err)
		}
		return err
	}
	writeCounts(stdout, res, o.DryRun)
	verb := "sent"
	if o.DryRun {
		verb = "found (dry run, nothing sent)"
	}
	fmt.Fprintf(stderr, "walbox replay: %d events in %d transactions %s, from trailing slot %s (copied at %s, replayed up to %s)\n",
		res.Events(), res.Transactions, verb, cfg.ReplaySlotName(), res.Start, res.End)
	return nil
}

// writeCounts prints one line per topic: the topic and its events.
func writeCounts(out io.Writer, res pipeline.ReplayResult, dryRun bool) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "EVENTS"
	if dryRun {
		head = "EVENTS (DRY RUN)"
	}
	fmt.Fprintf(tw, "TOPIC\t%s\n", head)
	topics := make([]string, 0, len(res.Topics))
	for t := range res.Topics {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		fmt.Fprintf(tw, "%s\t%d\n", t, res.Topics[t])
	}
	_ = tw.Flush()
}

func writeProgress(out io.Writer, p pipeline.ReplayProgress) {
	pct := 100.0
	if p.WALTotal > 0 {
		pct = 100 * float64(p.WALDone) / float64(p.WALTotal)
	}
	rate := float64(p.Events) / max(p.Elapsed.Seconds(), 1e-3)
	fmt.Fprintf(out, "walbox replay: %d events, WAL %s of %s (%.0f%%), %.0f events/s, %s elapsed\n",
		p.Events, humanBytes(p.WALDone), humanBytes(p.WALTotal), pct, rate, p.Elapsed.Round(time.Second))
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// replayProducer is the Kafka client of both replay modes, set up as walbox
// run's (security, batch limit capped at the brokers', buffering), or nil
// for a dry run. close releases it.
func replayProducer(ctx context.Context, cfg config.Config, dryRun bool, log *slog.Logger) (pipeline.Producer, func(), error) {
	if dryRun {
		return nil, func() {}, nil
	}
	kc, err := kafkaConfig(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	if kc.BatchMaxBytes, err = effectiveBatchMax(ctx, kc, cfg.KafkaSecurity, log); err != nil {
		return nil, nil, err
	}
	kc.MaxBufferedRecords = cfg.MaxInflightRecords
	kcl, err := pipeline.NewKafkaClient(kc, log, prometheus.NewRegistry())
	if err != nil {
		return nil, nil, err
	}
	return kcl, kcl.Close, nil
}
