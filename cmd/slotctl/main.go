// Command slotctl creates, inspects, lists, advances, copies and drops the Postgres objects walbox
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
	"github.com/walbox/walbox/internal/connerr"
	"github.com/walbox/walbox/internal/version"
)

const usageFormat = `slotctl manages the Postgres side of walbox: the publication over the outbox
table and the pgoutput logical replication slot walbox streams from.

Usage:
  slotctl create  [--slot NAME] [--publication NAME] [--table SCHEMA.TABLE] [--failover-slot]
                  check the server, create the publication and the slot if missing
  slotctl inspect [--slot NAME] [--publication NAME] [--json]
                  show the slot, the publication and any problem found
  slotctl drop    [--slot NAME] [--publication-too] [--replay-slot-too] [--yes]
                  drop the slot (and with --publication-too the publication)
  slotctl list    [--json]
                  list every logical slot of the database
  slotctl advance --to LSN [--slot NAME] [--yes] [--json]
                  move the slot forward, skipping what lies before LSN
  slotctl copy    --to NAME [--slot NAME] [--json]
                  copy the slot into a new permanent slot NAME
  slotctl help [command]
                  show this help, or a command's
  slotctl version
                  print the version, the VCS revision and the Go version
  Every command needs the database: --pg-dsn DSN, or the environment variable
  WALBOX_PG_DSN, or pg_dsn in the YAML file of --config FILE; for example
    slotctl create --pg-dsn "postgres://walbox:PASSWORD@localhost:5432/app"
  --slot, --publication and --table default to walbox, walbox, public.outbox.

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
  Prints what it created and the slot. Warns (stderr) when the new slot's
  table already holds rows: they were committed before the slot and will not
  be sent; the warning says how to send them.

inspect:
  --json               print JSON instead of text
  Prints the slot (plugin, database, active pid, confirmed_flush_lsn,
  restart_lsn, wal_status, retained WAL), the publication and its tables, and
  the problems the checks of create find. Changes nothing. Exits 1 if the slot
  or publication is missing or a problem was found.

drop:
  --publication-too    also drop the publication
  --replay-slot-too    also drop the slot's trailing replay slot (--replay-slot,
                       default <slot>_replay); without it, drop warns that the
                       trailing slot it leaves behind holds WAL until dropped
  --yes                do not ask for confirmation; required when stdin is not a terminal
  Drops the slot, which discards its position: outbox rows committed after its
  confirmed_flush_lsn and not yet published are not sent by a new slot (publish
  them again from the outbox table). Refuses while a process streams from the
  slot. On a terminal it asks you to type the slot's name. A slot or
  publication that does not exist is reported; it is an error only if nothing
  at all was found to drop. Before asking, warns (stderr) how many unconfirmed
  outbox events the slot holds (counted on a temporary copy of it) and how
  much WAL.

list:
  --json               print JSON instead of a table
  Prints every logical slot of the database: plugin, active pid and client
  address, confirmed and restart LSN, retained WAL, wal_status,
  safe_wal_size; for walbox's slots (--slot, and the trailing replay slot
  <slot>_replay) the publication and its tables. A pgoutput slot
  "<name>_replay" whose slot <name> is gone is marked orphan: nothing
  advances it, so it holds WAL until dropped. Changes nothing.

advance:
  --to LSN             the new position, e.g. 16/B374D848 (required)
  --yes                do not ask for confirmation; required when stdin is not a terminal
  --json               print the result as JSON
  Moves the slot forward with pg_replication_slot_advance. Says first how
  much WAL and how many outbox events it skips (counted on a temporary copy
  of the slot, or "could not count"); on a terminal asks you to type the
  slot's name. Refuses to move backwards and while a process streams from
  the slot (exit 3).

copy:
  --to NAME            the new slot's name (required)
  --json               print the copy as JSON
  Copies the slot (pg_copy_logical_replication_slot) into a permanent slot at
  the same position; refuses a name that exists. The copy holds WAL until it
  is consumed or dropped.

Output: data on stdout; prompts and diagnostics on stderr.

Exit status:
  0  success
  1  failure (or, for inspect, something missing or wrong)
  2  usage error: unknown command or flag, missing --pg-dsn, malformed value,
     malformed LSN, drop or advance without --yes when stdin is not a terminal
  3  refused for safety, nothing changed: drop or advance of a slot a process
     streams from, advance backwards
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
	"list":    runList,
	"advance": runAdvance,
	"copy":    runCopy,
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
	case "version", "--version":
		fmt.Fprintln(e.stdout, "slotctl", version.Get())
		return exitOK
	case "reference": // hidden: writes docs/slotctl.md (reference.go)
		writeReference(e.stdout)
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
		msg := strings.ReplaceAll(connerr.Describe(err), "\nslotctl: ", "\n")
		fmt.Fprintf(e.stderr, "slotctl %s: %s\n", name, strings.TrimPrefix(msg, "slotctl: "))
	}
	return exitCode(err)
}
