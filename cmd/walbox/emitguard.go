package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/slotctl"
)

// emitGuardInterval is how often a running `walbox run --message-prefix`
// checks again that PUBLIC may not execute pg_logical_emit_message.
var emitGuardInterval = time.Minute

// watchEmitPrivilege keeps the forgery guard of --message-prefix up while
// walbox runs: the check at start (slotctl.Setup) says nothing about a
// GRANT ... TO PUBLIC made an hour later, after which any role could emit
// events. Every emitGuardInterval it checks again and returns the error
// (which stops walbox, as it would refuse to start) when PUBLIC may
// execute the function, unless --message-prefix-allow-public. On its first
// check it also warns when walbox's own role may emit messages (its
// credentials could forge events). Postgres being unreachable is left to
// the relay, which retries; the check runs again at the next interval. It
// returns nil when ctx ends.
func watchEmitPrivilege(ctx context.Context, cfg config.Config, every time.Duration, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	first := true
	for {
		err := checkEmitOnce(ctx, cfg, first, log)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, slotctl.ErrEmitMessagePublic):
			return fmt.Errorf("stopping: %w\n(this was checked at start too; someone granted it since)", err)
		case err != nil:
			log.Warn("could not check the privileges of pg_logical_emit_message; checking again later", "err", err, "retry_in", every.String())
		default:
			first = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkEmitOnce is one check of watchEmitPrivilege.
func checkEmitOnce(ctx context.Context, cfg config.Config, ownRole bool, log *slog.Logger) error {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := connectOrdinary(qctx, cfg.PGDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if ownRole {
		warnOwnEmit(qctx, conn, log)
	}
	err = slotctl.CheckEmitMessagePrivilege(qctx, conn)
	if errors.Is(err, slotctl.ErrEmitMessagePublic) && cfg.MessagePrefixAllowPublic {
		return nil // warned about at start
	}
	return err
}

// warnOwnEmit warns when walbox's own role, not a superuser, may execute
// pg_logical_emit_message (for instance through outbox_writer, which older
// heartbeat advice suggested granting it): with --message-prefix, anyone
// holding walbox's credentials could then emit events.
func warnOwnEmit(ctx context.Context, conn *pgx.Conn, log *slog.Logger) {
	var role string
	var can bool
	err := conn.QueryRow(ctx, `SELECT current_user::text, NOT r.rolsuper AND EXISTS (
			SELECT 1 FROM pg_catalog.pg_proc p
			WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
			  AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE'))
		FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`).Scan(&role, &can)
	if err != nil || !can {
		return
	}
	log.Warn("walbox's own role may execute pg_logical_emit_message, so whoever holds its credentials can emit outbox messages (--message-prefix); "+
		"revoke it (REVOKE outbox_writer FROM <role>, or REVOKE EXECUTE ON FUNCTION ...), and give heartbeats migrations/005_heartbeat_function.sql instead",
		"role", role)
}
