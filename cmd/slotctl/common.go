package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/slotctl"
)

// env is the process environment, injected for tests.
type env struct {
	stdin      io.Reader
	stdout     io.Writer
	stderr     io.Writer
	getenv     func(string) string
	stdinIsTTY bool
}

// commonOptions are the flags every subcommand takes.
type commonOptions struct {
	DSN         string
	Table       string
	Slot        string
	Publication string
	Timeout     time.Duration
}

// defaultTimeout bounds the database work of one command (not the prompt).
const defaultTimeout = time.Minute

func (o *commonOptions) register(fs *flag.FlagSet, e env) {
	envOr := func(name, def string) string {
		if v := e.getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&o.DSN, "pg-dsn", envOr("WALBOX_PG_DSN", ""), "")
	fs.StringVar(&o.Table, "table", envOr("WALBOX_TABLE", slotctl.DefaultTable), "")
	fs.StringVar(&o.Slot, "slot", envOr("WALBOX_SLOT", slotctl.DefaultSlot), "")
	fs.StringVar(&o.Publication, "publication", envOr("WALBOX_PUBLICATION", slotctl.DefaultPublication), "")
	fs.DurationVar(&o.Timeout, "timeout", defaultTimeout, "")
}

func (o *commonOptions) config(createMissing bool) (slotctl.Config, error) {
	cfg := slotctl.Config{Table: o.Table, Slot: o.Slot, Publication: o.Publication, CreateMissing: createMissing}
	if o.DSN == "" {
		return cfg, usageError{"no database to connect to: set --pg-dsn or WALBOX_PG_DSN (e.g. postgres://user@host:5432/db)"}
	}
	if o.Timeout <= 0 {
		return cfg, usageError{fmt.Sprintf("--timeout must be positive, got %s", o.Timeout)}
	}
	return cfg, cfg.Validate()
}

// connect opens an ordinary session. A DSN written for walbox's replication
// connection may carry replication=database, which would open a walsender
// session where the extended query protocol does not work: drop it.
func (o *commonOptions) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, usageError{fmt.Sprintf("--pg-dsn: %v", err)}
	}
	delete(cc.RuntimeParams, "replication")
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// parseFlags parses a subcommand's flags. Help goes to stdout and returns
// errHelp; other errors are usage errors.
func parseFlags(fs *flag.FlagSet, args []string, e env, help string) error {
	fs.SetOutput(io.Discard) // we print our own help text
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, help)
			return errHelp
		}
		return usageError{fmt.Sprintf("%v (run 'slotctl %s --help')", err, fs.Name())}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (run 'slotctl %s --help')", fs.Arg(0), fs.Name())}
	}
	return nil
}

// errHelp means help was printed: exit 0.
var errHelp = errors.New("help printed")

// confirm asks on stderr for word to be typed. It returns an error unless
// the user typed it; ctx ends the wait (stdin cannot be interrupted, so the
// read is abandoned to its goroutine).
func confirm(ctx context.Context, e env, prompt, word string) error {
	fmt.Fprint(e.stderr, prompt)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(e.stdin).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != word {
			return fmt.Errorf("not confirmed: expected %q, got %q; nothing was dropped", word, strings.TrimSpace(s))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("not confirmed: %w; nothing was dropped", ctx.Err())
	}
}

// bytesIEC renders a byte count for humans.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
