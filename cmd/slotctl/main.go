// Command slotctl creates, inspects and drops the Postgres objects walbox
// streams from: the publication over the outbox table and the pgoutput
// logical replication slot. Run `slotctl --help` for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/walbox/walbox/config"
)

const usageFormat = `slotctl manages the Postgres side of walbox: the publication over the outbox
table and the pgoutput logical replication slot walbox streams from.

Usage:
  slotctl create  [flags]   check the server, create the publication and the slot if missing
  slotctl inspect [flags]   show the slot, the publication and any problem found
  slotctl drop    [flags]   drop the slot (and with --publication-too the publication)
  slotctl help [command]    show this help, or a command's

Configuration: the same as walbox run's, read the same way: a flag, a WALBOX_*
environment variable, or a key of the YAML file named by --config or
WALBOX_CONFIG (the file may hold every key of walbox run; slotctl uses those
below and ignores the rest). Flags beat the environment, which beats the file.
Every command reads:
%s
and takes:
  --timeout DURATION   bound on the database work (not on the confirmation prompt);
                       default 1m.

create:
  --failover-slot, --topic, --column-*, --invalid-rows, --dead-letter-topic
                       as in walbox run: the slot's kind, and the routing whose
                       columns the table must have
  Runs the preflight checks (PostgreSQL 14+, wal_level = logical, a role with
  REPLICATION, the table exists and is readable, replication slots enabled),
  creates the publication (CREATE PUBLICATION ... FOR TABLE ... WITH (publish =
  'insert'); needs the table's owner) and then the slot. Existing ones are
  verified: a publication covering other tables or not publishing inserts, or
  a slot of another plugin or database, is an error that says how to fix it.
  Prints what it created and the slot.

inspect:
  --json               print JSON instead of text
  Prints the slot (plugin, database, active pid, confirmed_flush_lsn,
  restart_lsn, wal_status, retained WAL), the publication and its tables, and
  the problems the checks of create find. Changes nothing. Exits 1 if the slot
  or publication is missing or a problem was found.

drop:
  --publication-too    also drop the publication
  --yes                do not ask for confirmation; required when stdin is not a terminal
  Drops the slot, which discards its position: outbox rows committed after its
  confirmed_flush_lsn and not yet published are not sent by a new slot (publish
  them again from the outbox table). Refuses while a process streams from the
  slot. On a terminal it asks you to type the slot's name. A slot or
  publication that does not exist is reported; it is an error only if nothing
  at all was found to drop.

Output: data on stdout; prompts and diagnostics on stderr.

Exit status:
  0  success
  1  failure (or, for inspect, something missing or wrong)
  2  usage error: unknown command or flag, missing --pg-dsn, malformed value,
     drop without --yes when stdin is not a terminal
`

// usageText is slotctl's help; the options come from walbox's option table.
var usageText = func() string {
	var b strings.Builder
	config.Command{Name: "slotctl", Options: connOptions}.WriteOptions(&b)
	return fmt.Sprintf(usageFormat, strings.TrimRight(b.String(), "\n"))
}()

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := env{
		stdin:      os.Stdin,
		stdout:     os.Stdout,
		stderr:     os.Stderr,
		getenv:     os.Getenv,
		stdinIsTTY: isTerminal(os.Stdin),
	}
	code := run(ctx, os.Args[1:], e)
	stop()
	os.Exit(code)
}

// commands maps each subcommand to its function.
var commands = map[string]func(ctx context.Context, args []string, e env) error{
	"create":  runCreate,
	"inspect": runInspect,
	"drop":    runDrop,
}

// run runs one command line and returns the exit code.
func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usageText)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(e.stdout, usageText)
		return exitOK
	case "help":
		if len(rest) > 0 && commands[rest[0]] != nil {
			return run(ctx, []string{rest[0], "--help"}, e)
		}
		fmt.Fprint(e.stdout, usageText)
		return exitOK
	}
	cmd := commands[name]
	if cmd == nil {
		fmt.Fprintf(e.stderr, "slotctl: unknown command %q (run 'slotctl --help')\n", name)
		return exitUsage
	}
	err := cmd(ctx, rest, e)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		// The library's messages start with "slotctl: "; one prefix is enough.
		msg := strings.ReplaceAll(err.Error(), "\nslotctl: ", "\n")
		fmt.Fprintf(e.stderr, "slotctl %s: %s\n", name, strings.TrimPrefix(msg, "slotctl: "))
	}
	return exitCode(err)
}
