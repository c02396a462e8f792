package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/config"
)

// standbyCopiesInterval is how often watchStandbyCopies looks at the
// standbys of a multi-host --pg-dsn.
const standbyCopiesInterval = time.Minute

// watchStandbyCopies, with --failover-slot, looks at every host of a
// multi-host --pg-dsn that is a standby, at start and every interval: a slot
// of walbox's name there that is not a synchronized copy (PostgreSQL 17+,
// pg_replication_slots.synced = false) keeps PostgreSQL's slot
// synchronization from making one ("exiting from slot synchronization
// because same name slot ... already exists on the standby", logged by the
// standby every 10 s), so a failover to that standby leaves walbox a slot at
// the wrong position, or none it may use. After a switchover on two nodes the
// demoted primary keeps its own slot so. It warns once per standby, naming
// the fix, until the slot changes. It never stops walbox and returns when
// ctx ends.
func watchStandbyCopies(ctx context.Context, cfg config.Config, every time.Duration, log *slog.Logger) {
	pc, err := pgconn.ParseConfig(cfg.PGDSN)
	if err != nil || len(pc.Fallbacks) == 0 {
		return // one endpoint: its standbys are not known
	}
	warned := map[string]bool{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, h := range standbyHosts(pc) {
			blocked, err := sameNameUnsynced(ctx, h, cfg.Slot)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				// Down, or not reachable from here: nothing to say.
			case blocked && !warned[h.addr]:
				warned[h.addr] = true
				log.Warn("a standby of --pg-dsn holds a slot of walbox's name that is not a synchronized copy of the failover slot (synced = false), "+
					"so PostgreSQL cannot synchronize the slot to it (the standby logs \"exiting from slot synchronization because same name slot ... already exists on the standby\") "+
					"and a failover to it loses walbox's position. This happens to the demoted primary after a switchover. "+
					"Fix: on that standby, SELECT pg_drop_replication_slot('"+cfg.Slot+"'); its slot synchronization then creates the synchronized copy",
					"standby", h.addr, "slot", cfg.Slot)
			case !blocked && warned[h.addr]:
				delete(warned, h.addr)
				log.Info("the standby no longer holds an unsynchronized slot of walbox's name", "standby", h.addr, "slot", cfg.Slot)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type dsnHost struct {
	addr string
	cfg  *pgconn.Config
}

// standbyHosts is every host of pc, each as a configuration of its own
// that accepts any server (a standby too).
func standbyHosts(pc *pgconn.Config) []dsnHost {
	hosts := []dsnHost{}
	seen := map[string]bool{}
	add := func(host string, port uint16, fb *pgconn.FallbackConfig) {
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if seen[addr] {
			return // the same host with TLS and without (sslmode=prefer)
		}
		seen[addr] = true
		c := pc.Copy()
		c.Fallbacks = nil
		c.ValidateConnect = nil
		c.Host, c.Port = host, port
		if fb != nil {
			c.TLSConfig = fb.TLSConfig
		}
		if c.ConnectTimeout == 0 || c.ConnectTimeout > 5*time.Second {
			c.ConnectTimeout = 5 * time.Second
		}
		hosts = append(hosts, dsnHost{addr: addr, cfg: c})
	}
	add(pc.Host, pc.Port, nil)
	for _, fb := range pc.Fallbacks {
		add(fb.Host, fb.Port, fb)
	}
	return hosts
}

// sameNameUnsynced reports whether h is a standby holding a slot named
// slot that is not synchronized from the primary.
func sameNameUnsynced(ctx context.Context, h dsnHost, slot string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, h.cfg)
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", h.addr, err)
	}
	defer conn.Close(context.Background())
	res := conn.ExecParams(cctx, `SELECT pg_catalog.pg_is_in_recovery()
		AND COALESCE((SELECT to_jsonb(s)->>'synced' = 'false' FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1), false)`,
		[][]byte{[]byte(slot)}, nil, nil, nil).Read()
	if res.Err != nil {
		return false, res.Err
	}
	return len(res.Rows) == 1 && string(res.Rows[0][0]) == "t", nil
}
