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

	"github.com/walbox/walbox/config"
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

// Options of walbox's configuration each command reads. They come from
// the same flags, WALBOX_* variables and --config file as `walbox run`'s,
// through the same option table (package config), so one walbox.yaml
// serves both; a file's other keys are accepted and ignored.
var (
	// connOptions name the database and the objects: every command.
	connOptions = []string{"pg-dsn", "table", "slot", "publication"}
	// countOptions add what says which changes are events, for the
	// commands that count them (drop, advance).
	countOptions = []string{"message-prefix"}
	// createConfigOptions add what create uses: the slot kind, and the routing
	// whose columns it checks against the table.
	createConfigOptions = []string{
		"failover-slot",
		"topic", "column-id", "column-aggregate-type", "column-aggregate-id", "column-event-type",
		"column-payload", "column-headers", "column-topic", "invalid-rows", "dead-letter-topic",
	}
)

// commonOptions are what every subcommand takes: walbox's configuration
// and slotctl's own --timeout.
type commonOptions struct {
	cfg     config.Config
	Timeout time.Duration
}

// defaultTimeout bounds the database work of one command (not the prompt).
const defaultTimeout = time.Minute

// command returns the config.Command of subcommand name, whose own flags
// are defined on fs; --timeout is added here.
func (o *commonOptions) command(name string, fs *flag.FlagSet, options ...[]string) config.Command {
	fs.DurationVar(&o.Timeout, "timeout", defaultTimeout, "")
	var opts []string
	for _, list := range options {
		opts = append(opts, list...)
	}
	return config.Command{Name: "slotctl " + name, Options: opts, Flags: fs}
}

// load parses args into o (and the command's own flags on cmd.Flags).
// On --help it prints help and the options to stdout and returns errHelp.
// Configuration problems wrap config.ErrInvalid (exit 2); the DSN's
// password never appears in them.
func (o *commonOptions) load(cmd config.Command, args []string, e env, help string) error {
	cfg, err := cmd.Load(args, e.getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, help)
		fmt.Fprint(e.stdout, "\nOptions shared with walbox run (flag, environment variable, key of the --config file):\n")
		cmd.WriteOptions(e.stdout)
		fmt.Fprint(e.stdout, timeoutHelp)
		return errHelp
	}
	if err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return usageError{fmt.Sprintf("--timeout must be positive, got %s", o.Timeout)}
	}
	o.cfg = cfg
	return nil
}

const timeoutHelp = `
slotctl:
  --timeout DURATION  (default 1m0s)
      Bound on the database work (not on the confirmation prompt)
`

// slotConfig is the slotctl library's configuration, with defaults.
func (o *commonOptions) slotConfig(createMissing bool) slotctl.Config {
	cfg := o.cfg.SlotctlConfig()
	cfg.CreateMissing = createMissing
	return cfg.WithDefaults()
}

// connect opens an ordinary session. A DSN written for walbox's replication
// connection may carry replication=database, which would open a walsender
// session where the extended query protocol does not work: it is dropped.
func (o *commonOptions) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := o.cfg.ConnConfig()
	if err != nil {
		return nil, err // names --pg-dsn, without the password; exit 2
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// errHelp means help was printed: exit 0.
var errHelp = errors.New("help printed")

// confirm asks on stderr for word to be typed. It returns an error unless
// the user typed it; ctx ends the wait (stdin cannot be interrupted, so the
// read is abandoned to its goroutine).
func confirm(ctx context.Context, e env, prompt, word string) error {
	return confirmNothing(ctx, e, prompt, word, "nothing was dropped")
}

// confirmNothing is confirm whose refusal ends with nothing, what did not
// happen.
func confirmNothing(ctx context.Context, e env, prompt, word, nothing string) error {
	fmt.Fprint(e.stderr, prompt)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(e.stdin).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != word {
			return fmt.Errorf("not confirmed: expected %q, got %q; %s", word, strings.TrimSpace(s), nothing)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("not confirmed: %w; %s", ctx.Err(), nothing)
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
