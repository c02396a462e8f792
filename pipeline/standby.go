package pipeline

// Standby reports whether the relay is waiting, as a standby, for a slot
// another process holds (Config.Standby). Safe for concurrent use.
func (r *Relay) Standby() bool { return r.standby.Load() }

// enterStandby marks the relay as standby after START_REPLICATION found the
// slot busy; it logs once per period of standing by, not per retry.
func (r *Relay) enterStandby(err error) {
	if r.standby.Swap(true) {
		return
	}
	r.metrics.standby.Set(1)
	r.log.Info("standby: the slot is in use by another process; waiting for it",
		"slot", r.cfg.Slot, "retry_every", r.cfg.StandbyRetry.String(), "err", err)
}

// leaveStandby is called once a session streams: a standby has taken over.
func (r *Relay) leaveStandby() {
	if !r.standby.Swap(false) {
		return
	}
	r.metrics.standby.Set(0)
	r.log.Info("standby: took over the slot", "slot", r.cfg.Slot)
}
