// Command walbox relays transactional-outbox rows from a Postgres logical
// replication slot to Kafka. main only wires packages together; see run.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/internal/connerr"
	"github.com/walbox/walbox/internal/version"
)

// Exit codes, in one place so scripts and the e2e suite can rely on them.
const (
	exitOK    = 0
	exitFatal = 1
	exitUsage = 2
)

func main() {
	os.Exit(mainCode(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usageText = `walbox moves transactional-outbox rows from Postgres to Kafka by reading the
WAL through a pgoutput logical replication slot. Every INSERT into the outbox
table becomes a Kafka record; the slot is confirmed only once Kafka has
acknowledged the record and everything before it, so nothing is lost and no
row is ever updated.

Usage:
  walbox run [options]     stream the outbox to Kafka until SIGINT/SIGTERM
  walbox replay --from LSN|TIME [--to LSN|TIME] [--topic T] [--dry-run] [options]
                           produce a saved range again from the trailing slot
                           kept by walbox run --replay-window
  walbox migrate-from-debezium --debezium-config FILE [--debezium-offsets FILE] [options]
                           take over a stopped Debezium connector's slot from
                           its stored offset and run in Debezium mode
  walbox config check [--connect] [options]
                           print the effective configuration with the source
                           of each value, secrets redacted, and every problem
  walbox config reference  print the Markdown reference of every option
  walbox version           print the version, the VCS revision and the Go version
  walbox help              show this help

Run 'walbox run --help' for every option; each can also be set by an
environment variable or in a YAML file given with --config.
`

func mainCode(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	case "version", "--version":
		fmt.Fprintln(stdout, "walbox", version.Get())
		return exitOK
	case "run":
		cfg, err := config.Load(args[1:], getenv, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		if err != nil {
			fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
			return exitUsage
		}
		setMemoryLimit(cfg, getenv)
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		// What the server refuses is a configuration problem: exit 2 with
		// every problem, before anything starts.
		if code, refused := preflightRun(ctx, cfg, stderr); refused {
			return code
		}
		if err := runRelay(ctx, cfg, stderr); err != nil {
			fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
			return exitFatal
		}
		return exitOK
	case "replay":
		return replayMain(args[1:], getenv, stdout, stderr)
	case "config":
		return configMain(args[1:], getenv, stdout, stderr)
	case "migrate-from-debezium":
		return migrateMain(args[1:], getenv, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "walbox: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
}

// oneLine folds a possibly multi-line error (errors.Join) into one line, so
// the fatal reason is a single line on stderr as operators and supervisors
// expect. A failed Postgres connection is worded by connerr.Describe: the
// cause without the refused TLS attempt of sslmode=prefer, and the fix.
func oneLine(err error) string {
	b := []byte(connerr.Describe(err))
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	return string(b)
}

// Memory limit (issue 7, item 6). walbox's live memory is bounded by its
// in-flight window, but Go's collector lets the heap grow to twice what is
// live and keeps freed pages (1 MB payloads fragment it) until its
// scavenger returns them, which put the process above 64 MiB RSS with the
// defaults. A soft limit sized to the window makes the collector and the
// scavenger work before that; the live heap stays well below it, so the
// collector does not thrash.
const (
	// memLimitBase is the room beyond the in-flight window: buffers of
	// the replication connection and of the Kafka client, metrics, and
	// what the collector needs to work without running constantly.
	memLimitBase = 16 << 20
	// memLimitPerRecord is the memory an in-flight record takes beyond
	// its key, value and headers (the record, its promise, bookkeeping).
	memLimitPerRecord = 1 << 10
)

// memoryLimit returns the soft memory limit for cfg: about 29 MiB with
// the defaults. With the ~16 MiB of the binary's own pages that RSS also
// counts, it keeps the whole process near 45 MiB, under the 64 MiB target.
func memoryLimit(cfg config.Config) int64 {
	return memLimitBase + cfg.MaxInflightBytes + int64(cfg.MaxInflightRecords)*memLimitPerRecord
}

// setMemoryLimit sets memoryLimit(cfg) as the Go runtime's soft memory
// limit, unless the user set GOMEMLIMIT, which then applies as given.
func setMemoryLimit(cfg config.Config, getenv func(string) string) {
	if getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(memoryLimit(cfg))
}
