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
	"syscall"

	"github.com/walbox/walbox/config"
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
  walbox version           print the version
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
		fmt.Fprintln(stdout, "walbox", version)
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
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if err := runRelay(ctx, cfg, stderr); err != nil {
			fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
			return exitFatal
		}
		return exitOK
	default:
		fmt.Fprintf(stderr, "walbox: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// oneLine folds a possibly multi-line error (errors.Join) into one line, so
// the fatal reason is a single line on stderr as operators and supervisors
// expect.
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	return string(b)
}
