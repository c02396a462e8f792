package slotctl

import (
	"context"
	"fmt"
)

// Features are the replication features a server offers, decided from its
// server_version_num rather than by trial, so that walbox can say up front
// what a configuration needs.
type Features struct {
	// Messages: pgoutput's "messages" option, logical decoding messages in
	// the stream (14+).
	Messages bool
	// Streaming: proto_version 2, in-progress transactions streamed before
	// commit (14+). The relay uses it unless switched off, so large
	// transactions do not spill on the primary; it still produces only
	// committed work, keeping streamed changes in its spool until the
	// commit (pipeline/stream.go).
	Streaming bool
	// FailoverSlots: the failover option of logical slots, which a standby
	// with sync_replication_slots keeps in sync (17+).
	FailoverSlots bool
}

// FeaturesFor returns the features of a server_version_num.
func FeaturesFor(versionNum int) Features {
	return Features{
		Messages:      versionNum >= 140000,
		Streaming:     versionNum >= 140000,
		FailoverSlots: versionNum >= 170000,
	}
}

func serverVersionNum(ctx context.Context, conn Querier) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, fmt.Errorf("slotctl: read server_version_num: %w", err)
	}
	return v, nil
}
