package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions configures StartStandby. The zero value streams straight
// from the primary, without a replication slot.
type StandbyOptions struct {
	// PrimaryHost and PrimaryPort are where the standby's walreceiver
	// connects; empty and 0 mean the primary itself. Point them at a
	// faultproxy to cut the standby off from its primary.
	PrimaryHost string
	PrimaryPort int
	// PrimarySlotName is the physical slot on the primary the standby
	// streams through (primary_slot_name); the caller creates it. The
	// slot sync worker of PostgreSQL 17+ needs one.
	PrimarySlotName string
	// Settings are extra postgresql.conf settings of the standby, e.g.
	// {"sync_replication_slots": "on", "hot_standby_feedback": "on"}.
	Settings map[string]string
}

// StartStandby makes a streaming physical standby of primary and starts it.
//
// It needs no pg_basebackup (the npm builds have none): it stops the
// primary cleanly, copies its data directory (a cleanly stopped cluster is
// a valid base backup) without the replication slots in pg_replslot/, starts
// the primary again on its port, then starts the copy on a free port with
// standby.signal and primary_conninfo. It returns once the standby accepts
// connections, which for a hot standby means it reached a consistent state.
// The primary's sessions are ended by the restart.
func StartStandby(ctx context.Context, primary *Server, opts StandbyOptions) (*Server, error) {
	settings := map[string]string{}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	if _, err := mergeSettings(settings); err != nil { // validates names and values
		return nil, err
	}
	root, err := makeRoot(primary.cred)
	if err != nil {
		return nil, err
	}
	s := &Server{
		binDir:  primary.binDir,
		root:    root,
		dataDir: filepath.Join(root, "data"),
		major:   primary.major,
		cred:    primary.cred,
		tls:     primary.tls,
		pwAuth:  primary.pwAuth,
	}
	s.logPath = filepath.Join(s.dataDir, "postgres.log")
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(root)
		return nil, err
	}

	primary.mu.Lock()
	err = primary.stopLocked(ctx, sigFast)
	if err == nil {
		// As the server's account, so ownership and modes carry over.
		var out []byte
		if out, err = s.run(ctx, "cp", "-a", primary.dataDir, s.dataDir); err != nil {
			err = fmt.Errorf("pgtest: copy the primary's data directory: %w\n%s", err, out)
		}
	}
	startErr := primary.startLocked(ctx)
	primary.mu.Unlock()
	if err = errors.Join(err, startErr); err != nil {
		return fail(err)
	}

	if err := s.prepareStandby(primary, opts, settings); err != nil {
		return fail(err)
	}
	if err := s.startFreePort(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// prepareStandby turns the copied data directory into a standby's.
func (s *Server) prepareStandby(primary *Server, opts StandbyOptions, settings map[string]string) error {
	slots, err := os.ReadDir(filepath.Join(s.dataDir, "pg_replslot"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	for _, e := range slots {
		if err := os.RemoveAll(filepath.Join(s.dataDir, "pg_replslot", e.Name())); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	// The primary's log and pid files are not the standby's.
	for _, name := range []string{"postgres.log", "postmaster.pid", "postmaster.opts"} {
		if err := os.Remove(filepath.Join(s.dataDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	host, port := opts.PrimaryHost, opts.PrimaryPort
	if host == "" {
		host = "127.0.0.1"
	}
	if port == 0 {
		port = primary.port
	}
	// dbname: the slot sync worker of PostgreSQL 17+ connects to a database.
	settings["primary_conninfo"] = fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres application_name=standby sslmode=disable", host, port)
	if opts.PrimarySlotName != "" {
		settings["primary_slot_name"] = opts.PrimarySlotName
	}
	settings["unix_socket_directories"] = s.root
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	var conf strings.Builder
	conf.WriteString("\n# --- standby, added by walbox internal/pgtest ---\n")
	for _, name := range names {
		fmt.Fprintf(&conf, "%s = %s\n", name, quoteConf(settings[name]))
	}
	if err := appendFile(filepath.Join(s.dataDir, "postgresql.conf"), conf.String()); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	signal := filepath.Join(s.dataDir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	for _, p := range []string{signal, filepath.Join(s.dataDir, "postgresql.conf")} {
		if err := s.cred.chown(p); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_ = f.Close()
	return s.cred.chown(s.logPath)
}

// Promote promotes a standby to primary (pg_promote) and waits until it
// accepts writes or ctx ends. The server switches to a new timeline.
func (s *Server) Promote(ctx context.Context) error {
	wait := 60
	if d, ok := ctx.Deadline(); ok {
		wait = max(1, int(time.Until(d).Seconds()))
	}
	conn, err := pgx.Connect(ctx, s.adminDSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_promote(true, `+strconv.Itoa(wait)+`)`).Scan(&ok); err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	if !ok {
		return fmt.Errorf("pgtest: promote: the server was not promoted within %ds\n%s", wait, s.LogTail(20))
	}
	return nil
}

// Standby starts a streaming standby of primary for one test (see
// StartStandby) and closes it in t.Cleanup. A failure fails the test.
func Standby(t testing.TB, primary *Server, opts StandbyOptions) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := StartStandby(ctx, primary, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: close standby: %v", err)
		}
	})
	return s
}
