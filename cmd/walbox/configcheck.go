package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
)

const configUsageText = `Usage:
  walbox config check [--connect] [--connect-timeout DURATION] [--config FILE] [walbox run options]
  walbox config reference

Prints the effective configuration of walbox run with the source of each
value (flag, env, FILE:LINE, default), secrets redacted, and every problem.
With --connect it also connects to Postgres and makes the checks walbox run
makes on start (the server version, wal_level, the REPLICATION privilege, the
outbox table and every column the routing options name, the publication and
the slot, and what walbox run would create on a first start), and asks Kafka
for its metadata with the client options walbox run uses. walbox run refuses
to start, with exit status 2 and the same text, on each problem listed.

Exit status: 0 when everything checked is fine, 2 when a problem was found.

walbox config reference prints the Markdown reference of every option (flag,
environment variable, YAML key, default, accepted values), as committed in
docs/configuration.md.
`

// configMain runs `walbox config SUBCOMMAND`.
func configMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "reference" {
		writeReference(stdout)
		return exitOK
	}
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, configUsageText)
			return exitOK
		}
		fmt.Fprint(stderr, configUsageText)
		return exitUsage
	}
	return configCheck(args[1:], getenv, stdout, stderr)
}

// configCheck prints the settings and problems on stdout and a one-line
// verdict on stderr when there are problems.
func configCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("walbox config check", flag.ContinueOnError)
	connect := fs.Bool("connect", false, "also check that Postgres and Kafka accept the configuration")
	timeout := fs.Duration("connect-timeout", 10*time.Second, "how long each --connect check may take")
	settings, cfg, err := config.Command{Name: "walbox config check", Flags: fs}.Sources(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, configUsageText)
		fmt.Fprintln(stdout, "\nOptions of walbox config check:\n  --connect\n  --connect-timeout DURATION (default 10s)\n\nRun 'walbox run --help' for the other options.")
		return exitOK
	}
	if settings == nil { // the arguments or the file could not be read
		fmt.Fprintf(stderr, "walbox: %v\n", oneLine(err))
		return exitUsage
	}
	printSettings(stdout, settings)
	printDebezium(stdout, cfg)

	var problems []string
	for _, e := range config.Split(err) {
		problems = append(problems, e.Error())
	}
	if *connect {
		if len(problems) > 0 {
			fmt.Fprintln(stdout, "\nConnection checks skipped: fix the configuration problems first.")
		} else {
			problems = append(problems, connectChecks(stdout, cfg, *timeout)...)
		}
	}
	if len(problems) == 0 {
		fmt.Fprintln(stdout, "\nOK: no problems found.")
		return exitOK
	}
	fmt.Fprintf(stdout, "\n%d problem(s):\n", len(problems))
	for _, p := range problems {
		fmt.Fprintf(stdout, "  - %s\n", cfg.Scrub(p))
	}
	fmt.Fprintf(stderr, "walbox: configuration check found %d problem(s)\n", len(problems))
	return exitUsage
}

func printSettings(w io.Writer, settings []config.Setting) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPTION\tVALUE\tSOURCE")
	for _, s := range settings {
		fmt.Fprintf(tw, "--%s\t%s\t%s\n", s.Flag, displayValue(s.Value), s.Source)
	}
	tw.Flush()
}

// displayValue keeps the table readable: an empty value is shown as "",
// and line breaks cannot split a row.
func displayValue(v string) string {
	if v == "" {
		return `""`
	}
	return strings.NewReplacer("\n", `\n`, "\t", " ").Replace(v)
}

// connectChecks checks Postgres and Kafka with cfg, printing what it found
// and returning the problems.
func connectChecks(w io.Writer, cfg config.Config, timeout time.Duration) []string {
	fmt.Fprintln(w, "\nConnection checks:")
	var problems []string
	problems = append(problems, checkPostgres(w, cfg, timeout)...)
	problems = append(problems, checkKafka(w, cfg, timeout)...)
	return problems
}

func checkPostgres(w io.Writer, cfg config.Config, timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cc, err := cfg.ConnConfig()
	if err != nil {
		return []string{err.Error()}
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return []string{fmt.Sprintf("postgres: cannot connect with --pg-dsn: %v; check the host, port, user, password and pg_hba.conf", err)}
	}
	defer conn.Close(context.Background())
	// The preflight of walbox run (preflight.go), so that what it refuses
	// is listed here.
	rep, err := checkServer(ctx, conn, cfg)
	info := rep.plan.Server
	if info.Version != "" {
		fmt.Fprintf(w, "  postgres: connected as %q to database %q, PostgreSQL %s, wal_level=%s, replication privilege=%t, superuser=%t\n",
			info.User, info.Database, info.Version, info.WALLevel, info.Replication, info.Superuser)
	}
	if info.TableOID != 0 {
		fmt.Fprintf(w, "  postgres: outbox table %s found (oid %d)\n", info.Table, info.TableOID)
	}
	if s := rep.plan.Slot; s.Name != "" {
		fmt.Fprintf(w, "  postgres: slot %q found, confirmed_flush_lsn %s, wal_status %s\n", s.Name, s.ConfirmedFlushLSN, s.WALStatus)
	}
	for _, n := range rep.notes {
		fmt.Fprintf(w, "  postgres: note: %s\n", n)
	}
	for _, n := range rep.plan.Warnings {
		fmt.Fprintf(w, "  postgres: warning: %s\n", n)
	}
	if err != nil {
		return []string{"postgres: " + strings.TrimPrefix(err.Error(), "slotctl: ")}
	}
	var problems []string
	for _, p := range rep.problems {
		problems = append(problems, "postgres: "+p.Error())
	}
	return problems
}

func checkKafka(w io.Writer, cfg config.Config, timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The same client settings (TLS, SASL included) as walbox run's.
	kc, err := cfg.KafkaConfig()
	if err != nil {
		return []string{err.Error()}
	}
	cl, err := pipeline.NewKafkaClient(kc, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return []string{err.Error()}
	}
	defer cl.Close()
	meta, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if af := cfg.KafkaSecurity.AuthFailure(err); af != nil {
		return []string{"kafka: " + af.Error()}
	}
	if err != nil {
		return []string{fmt.Sprintf("kafka: metadata request to --kafka-brokers %s failed within %s: %v; check the addresses, the listeners the brokers advertise, and TLS/SASL settings",
			strings.Join(cfg.KafkaBrokers, ","), timeout, err)}
	}
	fmt.Fprintf(w, "  kafka: cluster %q answered, %d broker(s), controller %d\n", meta.Cluster, len(meta.Brokers), meta.Controller)
	return nil
}
