package retention

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/slotctl"
)

// SlotSuffix makes the default trailing slot name: "<slot>_replay".
const SlotSuffix = "_replay"

// SlotName returns the trailing slot's name: replaySlot, or "<slot>_replay"
// when it is empty.
func SlotName(slot, replaySlot string) string {
	if replaySlot != "" {
		return replaySlot
	}
	return slot + SlotSuffix
}

// Validate checks a window and the trailing slot's name (replaySlot, or the
// default made from slot). It is the one check of --replay-window and
// --replay-slot; the configuration package reports its verdict.
func Validate(window time.Duration, slot, replaySlot string) error {
	if window < 0 {
		return fmt.Errorf("%w: window %s is negative; use 0 to disable the trailing slot, or a duration such as 24h", ErrInvalidConfig, window)
	}
	name := SlotName(slot, replaySlot)
	if err := slotctl.ValidateSlotName(name); err != nil {
		if replaySlot == "" {
			return fmt.Errorf("%w: the default trailing slot name %q (slot + %q) is not a valid slot name; set --replay-slot: %v", ErrInvalidConfig, name, SlotSuffix, err)
		}
		return fmt.Errorf("%w: trailing slot: %v", ErrInvalidConfig, err)
	}
	if name == slot {
		return fmt.Errorf("%w: trailing slot %q is the live slot; give --replay-slot another name", ErrInvalidConfig, name)
	}
	return nil
}

// Config is a Keeper's settings.
type Config struct {
	// Slot is the live slot, ReplaySlot the trailing one (SlotName).
	Slot, ReplaySlot string
	// Window is how far behind the live slot the trailing slot stays; > 0.
	Window time.Duration
	// Interval is how often the trailing slot is advanced; 0 means
	// Window/16, between 1s and 1m.
	Interval time.Duration
	// Rewound, when set, returns how many times the live stream's history
	// switched and the position the last switch rewound it to (the end of
	// the WAL the old and new history share): the keeper then forgets the
	// positions it recorded after that one (History.Rewind). It is called
	// from Run's goroutine and must be safe for concurrent use;
	// *pipeline.Relay's HistoryRewound is one.
	Rewound func() (n uint64, to pglogrepl.LSN)
	// Buckets is the History's resolution; 0 means DefaultBuckets.
	Buckets int
	// RetryDelay is the wait after a failed step (5s when 0).
	RetryDelay time.Duration
	// Publication is the live slot's publication, with which the keeper
	// reads the trailing slot's stream while its history covers less than
	// the window (after a start). Empty: it does not, and after a start
	// the trailing slot does not move for a window.
	Publication string
	// ScanBytes bounds the WAL one such read decodes past the trailing
	// slot's position; DefaultScanBytes when 0.
	ScanBytes int64
	// Now is the clock; time.Now when nil. For tests.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = min(max(c.Window/16, time.Second), time.Minute)
	}
	if c.ScanBytes <= 0 {
		c.ScanBytes = DefaultScanBytes
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = 5 * time.Second
	}
}
