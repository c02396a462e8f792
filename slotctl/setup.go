package slotctl

import "context"

// Ensure prepares the server for walbox in the order that works: Preflight,
// then EnsurePublication, then EnsureSlot (the publication must exist before
// the slot, see the package doc). It returns what Preflight and EnsureSlot
// found. `walbox run` and `slotctl create` use it.
func Ensure(ctx context.Context, conn Querier, cfg Config) (ServerInfo, SlotInfo, error) {
	info, err := Preflight(ctx, conn, cfg)
	if err != nil {
		return info, SlotInfo{}, err
	}
	if err := EnsurePublication(ctx, conn, cfg); err != nil {
		return info, SlotInfo{}, err
	}
	slot, err := EnsureSlot(ctx, conn, cfg)
	return info, slot, err
}
