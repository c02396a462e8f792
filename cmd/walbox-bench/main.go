// Command walbox-bench measures walbox against a throwaway Postgres and a
// Kafka broker, next to the references it has to beat: a minimal
// logical-replication consumer (the ceiling) and the polling relay teams run
// today. It runs every scenario one after another, prints a table to stdout
// and writes results.json and latency.svg to --out. See package bench.
//
//	go run ./cmd/walbox-bench            # default run, under 10 minutes on 2 cores
//	go run ./cmd/walbox-bench --quick    # about 2.5 minutes, for development
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/walbox/walbox/bench"
	"github.com/walbox/walbox/config"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the benchmark could not run, or a scenario failed
	exitUsage  = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	quick         bool
	out           string
	broker        string
	events        int
	txnSize       int
	aggregates    int
	rate          int
	duration      time.Duration
	largeTxn      string
	foreignRows   int
	largeLive     string
	payloadRows   int
	payloadBytes  int
	pollBatches   string
	scenarios     string
	loadConns     int
	writerConns   int
	steadyCeiling bool
	cpuProfile    string
	walboxBin     string
	walboxLinger  time.Duration
	walboxArgs    string
	walboxEnv     string
	pollLimit     time.Duration
	verbose       bool
	withDebezium  bool
	exactlyOnce   bool
	eosInterval   time.Duration
	avro          bool
	tracing       bool
}

// scenarioNames are the scenarios --scenarios accepts.
var scenarioNames = []string{"backlog", "steady", "large", "payload", "foreign-update", "large-live"}

// Sizes of the default and the quick run.
var (
	defaults = options{events: 1_000_000, duration: 60 * time.Second, largeTxn: "250000,1000000", payloadRows: bench.LargePayloadRows,
		foreignRows: 3_000_000, largeLive: "500000"}
	quick = options{events: 50_000, duration: 10 * time.Second, largeTxn: "25000,100000", payloadRows: 50,
		foreignRows: 300_000, largeLive: "50000"}
)

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("walbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: go run ./cmd/walbox-bench [options]

Runs walbox's benchmark against a throwaway Postgres and a broker: backlog
drain, steady-load latency, large transaction, large payloads, database
cost, each next to a minimal pglogrepl consumer (the ceiling) and a polling
relay; then a bulk UPDATE of a table outside the publication with outbox
events around it (foreign-update) and a large outbox transaction written
while walbox streams (large-live). walbox runs as its own process with
default settings; the peak RSS of every walbox run and the server's spill
and stream bytes of every slot are reported. Prints a table to stdout, progress to
stderr, and writes results.json and latency.svg to --out.

Options:
`)
		fs.PrintDefaults()
	}
	fs.BoolVar(&o.quick, "quick", false, "small sizes for development: 50,000-event backlog, 10 s steady load, 25,000/100,000-row transactions, 50 large payloads, a 300,000-row foreign UPDATE, a 50,000-row live transaction")
	fs.StringVar(&o.out, "out", "bench-results", "directory for results.json, latency.svg and walbox's logs")
	fs.StringVar(&o.broker, "broker", bench.BrokerAuto, "kfake, kafka (a real broker from internal/kafkatest) or auto (kafka when java and mvn are available)")
	fs.IntVar(&o.events, "events", defaults.events, "backlog size in events (quick: 50,000)")
	fs.IntVar(&o.txnSize, "txn-size", 100, "backlog rows per transaction")
	fs.IntVar(&o.aggregates, "aggregates", 1000, "distinct aggregates (record keys)")
	fs.IntVar(&o.rate, "rate", 5000, "steady-load events per second")
	fs.DurationVar(&o.duration, "duration", defaults.duration, "steady-load duration per relay (quick: 10s)")
	fs.StringVar(&o.largeTxn, "large-txn", defaults.largeTxn, "comma-separated row counts of the large-transaction scenario (quick: 25000,100000)")
	fs.IntVar(&o.foreignRows, "foreign-rows", defaults.foreignRows, "rows of the foreign-update scenario's table (outside the publication), all updated in one transaction while outbox events are written around it (quick: 300,000)")
	fs.StringVar(&o.largeLive, "large-live", defaults.largeLive, "comma-separated row counts of the large-live scenario: one outbox transaction written while walbox streams (quick: 50000)")
	fs.IntVar(&o.payloadRows, "payload-rows", defaults.payloadRows, "rows of the large-payload scenario, in transactions of 10 (quick: 50)")
	fs.IntVar(&o.payloadBytes, "payload-bytes", bench.LargePayloadBytes, "payload size of the large-payload scenario, in bytes")
	fs.StringVar(&o.pollBatches, "poll-batches", "100,1000", "comma-separated batch sizes of the polling relay")
	fs.StringVar(&o.scenarios, "scenarios", "backlog,steady,large,payload,foreign-update,large-live", "comma-separated scenarios to run")
	fs.IntVar(&o.loadConns, "load-conns", 2, "connections writing the backlog in parallel")
	fs.IntVar(&o.writerConns, "writer-conns", 4, "connections of the steady-load writer")
	fs.BoolVar(&o.steadyCeiling, "steady-ceiling", true, "also run the ceiling under the steady load, for the p99 ratio the targets name (one more run of --duration; --steady-ceiling=false skips it)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "also run walbox in this process for the backlog drain and the steady load, and write CPU profiles of those runs to this file and to the same name with -steady.pprof")
	fs.StringVar(&o.walboxBin, "walbox-bin", "", "walbox binary every walbox run uses (default: go build ./cmd/walbox)")
	fs.DurationVar(&o.walboxLinger, "walbox-linger", config.Defaults().ProducerLinger, "walbox's --producer-linger for every walbox run (default: walbox's own default)")
	fs.StringVar(&o.walboxArgs, "walbox-args", "", "extra arguments of every walbox run, space-separated (e.g. \"--max-inflight-records 5000\"); the default measures walbox's defaults")
	fs.StringVar(&o.walboxEnv, "walbox-env", "", "extra environment of every walbox run, comma-separated KEY=VALUE (e.g. GOMEMLIMIT=40MiB); GOMEMLIMIT, GOGC and WALBOX_* are not passed on from this process's environment")
	fs.DurationVar(&o.pollLimit, "poll-drain-limit", time.Minute, "stop a polling relay's backlog drain after this long and report the rate so far (0: no limit)")
	fs.BoolVar(&o.exactlyOnce, "exactly-once", true, "also run walbox with --delivery exactly-once (relay walbox-eos) in the backlog and steady scenarios, next to at-least-once; --exactly-once=false skips it")
	fs.BoolVar(&o.avro, "avro", true, "also run walbox with --value-format avro against a schema registry served from this process (franz-go's fake registry) in the backlog drain, and at 2,000 events/s in the steady scenario; --avro=false skips it")
	fs.BoolVar(&o.tracing, "tracing", true, "also drain the backlog with OpenTelemetry tracing on, 1 % and 100 % of rows sampled (relays walbox-trace-1%, walbox-trace-100%), spans sent to an OTLP sink in this process; --tracing=false skips it")
	fs.DurationVar(&o.eosInterval, "eos-txn-interval", config.Defaults().TransactionMaxInterval, "walbox-eos's --transaction-max-interval (default: walbox's own default)")
	fs.BoolVar(&o.verbose, "v", false, "log the relays' and the harness's diagnostics to stderr")
	fs.BoolVar(&o.withDebezium, "with-debezium", false, "also run Debezium 3.x (Postgres connector + Outbox Event Router in Kafka Connect standalone, jars from e2e/debezium/pom.xml through mvn) in the backlog and steady scenarios and print walbox/Debezium ratios; needs java 17+, mvn and a real broker")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["events"] {
			o.events = quick.events
		}
		if !set["duration"] {
			o.duration = quick.duration
		}
		if !set["large-txn"] {
			o.largeTxn = quick.largeTxn
		}
		if !set["payload-rows"] {
			o.payloadRows = quick.payloadRows
		}
		if !set["foreign-rows"] {
			o.foreignRows = quick.foreignRows
		}
		if !set["large-live"] {
			o.largeLive = quick.largeLive
		}
	}
	switch {
	case o.events < o.txnSize || o.txnSize < 1:
		return o, fmt.Errorf("--events (%d) must be at least --txn-size (%d), which must be positive", o.events, o.txnSize)
	case o.exactlyOnce && o.eosInterval <= 0:
		return o, errors.New("--eos-txn-interval must be positive")
	case o.aggregates < 1, o.rate < 1, o.duration <= 0, o.loadConns < 1, o.writerConns < 1, o.payloadRows < 1, o.payloadBytes < 1, o.foreignRows < 1:
		return o, errors.New("--aggregates, --rate, --duration, --load-conns, --writer-conns, --payload-rows, --payload-bytes and --foreign-rows must be positive")
	}
	for _, s := range strings.Split(o.scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(scenarioNames, s) {
			return o, fmt.Errorf("--scenarios: unknown scenario %q (want some of %s)", s, strings.Join(scenarioNames, ","))
		}
	}
	return o, nil
}

func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(strings.ReplaceAll(f, "_", "")); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s: %q is not a positive number", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return exitUsage
	}
	large, err := ints("large-txn", o.largeTxn)
	if err == nil {
		var polls, live []int
		if polls, err = ints("poll-batches", o.pollBatches); err == nil {
			if live, err = ints("large-live", o.largeLive); err == nil {
				return runBench(o, large, polls, live, stdout, stderr)
			}
		}
	}
	fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
	return exitUsage
}

func runBench(o options, large, polls, live []int, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return exitFailed
	}
	out, _ := filepath.Abs(o.out)

	if o.withDebezium && o.broker == bench.BrokerAuto {
		o.broker = bench.BrokerKafka // Connect cannot use kfake; fail rather than fall back
	}
	fmt.Fprintf(stderr, "walbox-bench: starting Postgres and the broker (%s)\n", o.broker)
	env, err := bench.StartEnv(ctx, bench.EnvOptions{Broker: o.broker, Log: log})
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return exitFailed
	}
	defer env.Close()
	fmt.Fprintf(stderr, "walbox-bench: %s; broker %s\n", env.PGVersion, env.BrokerKind)
	env.WalboxArgs = strings.Fields(o.walboxArgs)
	for _, kv := range strings.Split(o.walboxEnv, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			env.WalboxEnv = append(env.WalboxEnv, kv)
		}
	}

	var scenarios []string
	for _, s := range strings.Split(o.scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			scenarios = append(scenarios, s)
		}
	}
	r := bench.NewRunner(bench.Config{
		Quick: o.quick, Events: o.events, TxnSize: o.txnSize, Aggregates: o.aggregates, LoadConns: o.loadConns,
		Rate: o.rate, Duration: o.duration, WriterConns: o.writerConns, SteadyCeiling: o.steadyCeiling,
		LargeTxn: large, PollBatches: polls, Scenarios: scenarios, ForeignRows: o.foreignRows, LargeLive: live,
		LargePayloadRows: o.payloadRows, LargePayloadBytes: o.payloadBytes,
		ExactlyOnce: o.exactlyOnce, EOSTxnInterval: o.eosInterval, Avro: o.avro, Tracing: o.tracing,
		OutDir: out, CPUProfile: o.cpuProfile, WalboxBin: o.walboxBin, WalboxLinger: o.walboxLinger, PollDrainLimit: o.pollLimit,
		Log: log, Progress: stderr, WithDebezium: o.withDebezium,
	}, env)
	res, err := r.Run(ctx)
	if res == nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return exitFailed
	}
	if ok, perr := bench.PlotLatency(filepath.Join(out, "latency.svg"), res); perr != nil {
		res.Errors = append(res.Errors, "latency plot: "+perr.Error())
	} else if ok {
		res.LatencyPlot = filepath.Join(out, "latency.svg")
	}
	jsonPath := filepath.Join(out, "results.json")
	if werr := bench.WriteJSON(jsonPath, res); werr != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", werr)
		return exitFailed
	}
	bench.PrintTable(stdout, res)
	fmt.Fprintf(stdout, "Results: %s\n", jsonPath)
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return exitFailed
	}
	if len(res.Errors) > 0 {
		return exitFailed
	}
	return exitOK
}
