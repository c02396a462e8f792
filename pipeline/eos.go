package pipeline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Delivery modes (Config.Delivery).
const (
	// DeliveryAtLeastOnce confirms the slot once Kafka acknowledged every
	// record before the position; a crash sends again what was in flight.
	DeliveryAtLeastOnce = "at-least-once"
	// DeliveryExactlyOnce produces in Kafka transactions that also record
	// the position they cover in the state topic, and confirms the slot only
	// after the transaction committed; a read_committed consumer sees every
	// outbox row exactly once, whatever crashes. See eos.go and eos_txn.go.
	DeliveryExactlyOnce = "exactly-once"
)

// Deliveries lists the valid Config.Delivery values.
var Deliveries = []string{DeliveryAtLeastOnce, DeliveryExactlyOnce}

// Transaction phases passed to Config.TxnPhase.
const (
	// PhaseProduced: every record of a Kafka transaction, the state record
	// included, is acknowledged; the commit has not been sent.
	PhaseProduced = "produced"
	// PhaseCommitted: the Kafka transaction committed; the slot has not been
	// confirmed to the position it covers.
	PhaseCommitted = "committed"
	// PhaseConfirmed: the status update confirming that position was sent.
	PhaseConfirmed = "confirmed"
)

// TransactionalIDFor returns the default transactional id of a slot,
// "walbox-<slot>". It must be stable across restarts: a restarted walbox
// with the same id fences its predecessor and completes or aborts the
// transaction the predecessor left open, and its position in the state topic
// is found under that id.
func TransactionalIDFor(slot string) string { return "walbox-" + slot }

// ErrFenced is wrapped by the error walbox stops with when another producer
// with the same transactional id took over.
var ErrFenced = errors.New("kafka producer fenced")

// FencedError reports that another producer with the same transactional id
// (a second walbox on the same slot, usually) bumped the producer epoch: this
// instance can no longer commit, and must not confirm anything more. A
// transaction the broker aborted for being open longer than the transaction
// timeout is not reported so: it restarts the session instead.
type FencedError struct {
	TransactionalID string
	// Timeout is the transaction timeout in use.
	Timeout time.Duration
	Err     error
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("%v: another producer with transactional id %q took it over (the producer epoch was bumped) while this walbox's kafka transaction was open for less than the transaction timeout (%s), so this walbox cannot commit any more; its open Kafka transaction is aborted and the slot is not confirmed past the last commit. Run one walbox per slot (or --standby), or give each its own --transactional-id: %v",
		ErrFenced, e.TransactionalID, e.Timeout, e.Err)
}

func (e *FencedError) Unwrap() []error { return []error{ErrFenced, e.Err} }

// isFenced reports whether err means another producer with our
// transactional id took over.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// txnAbortedError ends a session whose Kafka transaction was aborted (a
// produce error, a failed commit, a lost replication connection with a
// transaction open): the relay reconnects, reads the committed position from
// the state topic again and produces again from there.
type txnAbortedError struct{ err error }

func (e *txnAbortedError) Error() string {
	return "kafka transaction aborted; restarting from the committed position: " + e.err.Error()
}
func (e *txnAbortedError) Unwrap() error { return e.err }

func isTxnAborted(err error) bool {
	var t *txnAbortedError
	return errors.As(err, &t)
}

// TxnProducer is the part of a transactional *kgo.Client the relay uses in
// exactly-once mode.
type TxnProducer interface {
	Producer
	BeginTransaction() error
	EndTransaction(ctx context.Context, commit kgo.TransactionEndTry) error
	AbortBufferedRecords(ctx context.Context) error
	// ProducerID loads the producer id: with a transactional id this fences
	// any predecessor and completes or aborts the transaction it left open.
	ProducerID(ctx context.Context) (int64, int16, error)
}

var _ TxnProducer = (*kgo.Client)(nil)

// StatePosition is what one committed Kafka transaction covers: the commit
// LSN and end LSN of the last whole Postgres transaction in it, the part of
// the Postgres transaction it ended inside (Split, when a Postgres
// transaction too large for one Kafka transaction was split), and the
// database history they belong to (History.Known is false in records
// written by a walbox that did not record it).
type StatePosition struct {
	CommitLSN pglogrepl.LSN
	EndLSN    pglogrepl.LSN
	// Split is the committed prefix of the Postgres transaction after
	// EndLSN, zero when the Kafka transaction ended at a Postgres commit.
	Split   SplitPosition
	History History
}

// SplitPosition is a position inside one Postgres transaction: its first
// Changes changes and messages (routed or not, counted as replayKey.ord
// counts them) are committed in Kafka. Decoding the transaction again
// yields the same changes in the same order, so the count names the same
// prefix on every replay.
type SplitPosition struct {
	CommitLSN pglogrepl.LSN
	Changes   uint32
}

// IsZero reports whether s names no position.
func (s SplitPosition) IsZero() bool { return s.CommitLSN == 0 }

// covers reports whether the change of key is in the committed prefix.
func (s SplitPosition) covers(key replayKey) bool {
	return !s.IsZero() && key.ord != nonTransactional && key.commit == s.CommitLSN && key.ord < s.Changes
}

// after reports whether p is further in the stream than q. A split
// position's EndLSN is the end of the last whole Postgres transaction
// before its split one, so positions order by EndLSN, then by the split.
func (p StatePosition) after(q StatePosition) bool {
	if p.EndLSN != q.EndLSN {
		return p.EndLSN > q.EndLSN
	}
	if p.Split.CommitLSN != q.Split.CommitLSN {
		return p.Split.CommitLSN > q.Split.CommitLSN
	}
	return p.Split.Changes > q.Split.Changes
}

// supersedes reports whether p, this process's own last commit, is newer
// than q, the position read from the state topic, so that p is resumed
// from instead. LSNs are compared only within one history: after a
// failover the new timeline reuses the old one's LSNs, and an instance's
// old commit on timeline 1 must not override its standby peer's later one
// on timeline 2 at a lower LSN. p wins over a position on its own history
// that it is after, and over one on an ancestor of its history; never over
// one on a later or another history.
func (p StatePosition) supersedes(q StatePosition) bool {
	if q.EndLSN == 0 && q.CommitLSN == 0 {
		return p.after(q)
	}
	a, b := p.History, q.History
	if !a.Known() || !b.Known() || a.SystemID != b.SystemID || a.Database != b.Database {
		return !b.Known() && p.after(q)
	}
	switch rel, _ := sharedHistory(a, b); rel {
	case historiesSame:
		return p.after(q)
	case historyDescendant:
		return true
	case historiesUnknown:
		if a.Timeline != b.Timeline {
			return a.Timeline > b.Timeline
		}
		return p.after(q)
	}
	return false
}

// StateStore reads the state topic. Implementations must be safe for
// concurrent use; KafkaState is walbox's.
type StateStore interface {
	// Topic is the state topic's name; the relay writes the position record
	// to it inside each transaction.
	Topic() string
	// Ensure creates the topic if it is missing and refuses one that
	// cannot hold the positions; the relay calls it at the start of every
	// session, before it reads. Warnings go to log.
	Ensure(ctx context.Context, log *slog.Logger) error
	// Last returns the position last committed under key, the zero
	// position if there is none. It reads only committed records.
	Last(ctx context.Context, key string) (StatePosition, error)
}

// stateValue is the JSON value of a state record. SystemID, Timeline and
// Database are absent from records of walboxes before they were recorded;
// such records are still read (resumeFrom). SplitCommitLSN and
// SplitChanges are absent unless the Kafka transaction ended inside a
// Postgres transaction; a walbox that does not know them reads commit_lsn
// and end_lsn only, which name the last whole Postgres transaction: it
// produces the split one again from its start (duplicates of the committed
// prefix, nothing lost).
type stateValue struct {
	Slot      string `json:"slot"`
	CommitLSN string `json:"commit_lsn"`
	EndLSN    string `json:"end_lsn"`
	// Records is the number of outbox records in the transaction.
	Records  int    `json:"records"`
	SystemID string `json:"system_id,omitempty"`
	Timeline int32  `json:"timeline,omitempty"`
	Database string `json:"database,omitempty"`
	// Ancestry is History.Ancestry: the switch points of the timeline's
	// history, absent on timeline 1 and in records of older walboxes.
	Ancestry string `json:"ancestry,omitempty"`
	// SplitCommitLSN is the commit LSN of the Postgres transaction the
	// Kafka transaction ended inside; its first SplitChanges changes are
	// committed.
	SplitCommitLSN string `json:"split_commit_lsn,omitempty"`
	SplitChanges   uint32 `json:"split_changes,omitempty"`
}

func encodeState(p StatePosition, records int) []byte {
	h := p.History
	v := stateValue{Slot: h.Slot, CommitLSN: p.CommitLSN.String(), EndLSN: p.EndLSN.String(), Records: records,
		SystemID: h.SystemID, Timeline: h.Timeline, Database: h.Database, Ancestry: h.Ancestry}
	if !p.Split.IsZero() {
		v.SplitCommitLSN, v.SplitChanges = p.Split.CommitLSN.String(), p.Split.Changes
	}
	b, _ := json.Marshal(v)
	return b
}

func decodeState(b []byte) (StatePosition, error) {
	var v stateValue
	if err := json.Unmarshal(b, &v); err != nil {
		return StatePosition{}, err
	}
	c, err := pglogrepl.ParseLSN(v.CommitLSN)
	if err != nil {
		return StatePosition{}, fmt.Errorf("commit_lsn: %w", err)
	}
	e, err := pglogrepl.ParseLSN(v.EndLSN)
	if err != nil {
		return StatePosition{}, fmt.Errorf("end_lsn: %w", err)
	}
	pos := StatePosition{CommitLSN: c, EndLSN: e,
		History: History{SystemID: v.SystemID, Timeline: v.Timeline, Database: v.Database, Slot: v.Slot, Ancestry: v.Ancestry}}
	if v.SplitCommitLSN != "" {
		sc, err := pglogrepl.ParseLSN(v.SplitCommitLSN)
		if err != nil {
			return StatePosition{}, fmt.Errorf("split_commit_lsn: %w", err)
		}
		if sc < e {
			return StatePosition{}, fmt.Errorf("split_commit_lsn %s is before end_lsn %s", sc, e)
		}
		pos.Split = SplitPosition{CommitLSN: sc, Changes: v.SplitChanges}
	}
	return pos, nil
}

// KafkaState is the StateStore walbox runs with: a compacted topic with one
// partition, keyed by transactional id, read with read_committed.
type KafkaState struct {
	kc    KafkaConfig
	topic string
}

var _ StateStore = (*KafkaState)(nil)

// NewKafkaState returns the state store on topic, reached with kc's brokers,
// TLS and SASL.
func NewKafkaState(kc KafkaConfig, topic string) *KafkaState {
	return &KafkaState{kc: kc, topic: topic}
}

// Topic returns the state topic's name.
func (s *KafkaState) Topic() string { return s.topic }

// Ensure checks the state topic, creating it if it is missing: one
// partition (the positions of one key must stay in order, and Last reads
// partition 0 only), cleanup.policy=compact (only the last position of each
// key matters; a delete policy would drop positions still needed),
// segment.ms 10 minutes, replication factor min(3, brokers). An existing
// topic with several partitions or another cleanup policy is refused
// (ErrStateTopic), with the fix. A replication factor below 2 is logged as
// a warning: a broker loss would make the positions unavailable. The relay
// calls it at the start of every session: a topic deleted meanwhile is
// created again with these settings, never by the producer's
// auto-creation with the brokers' defaults.
func (s *KafkaState) Ensure(ctx context.Context, log *slog.Logger) error {
	cl, err := kgo.NewClient(s.kc.connOpts()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Look first: creating needs CREATE permission even when the topic
	// exists, and an operator may have created it for a walbox without it.
	td, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("list the state topic %q: %w", s.topic, err)
	}
	if d, ok := td[s.topic]; ok && td.Has(s.topic) {
		if d.Err != nil {
			return fmt.Errorf("state topic %q: %w", s.topic, d.Err)
		}
		return s.check(ctx, adm, d, log)
	}
	brokers, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("list the brokers to create the state topic %q: %w", s.topic, err)
	}
	rf := int16(min(3, max(1, len(brokers.Brokers))))
	// Segments of 10 minutes let the cleaner compact all but the newest
	// records soon, so the topic stays about one record per key.
	compact, segment := "compact", "600000"
	_, err = adm.CreateTopic(ctx, 1, rf, map[string]*string{"cleanup.policy": &compact, "segment.ms": &segment}, s.topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create the state topic %q (1 partition, cleanup.policy=compact, replication factor %d): %w; create it yourself, or grant walbox CREATE on the cluster, or set --state-topic to an existing compacted topic with 1 partition", s.topic, rf, err)
	}
	if err == nil {
		log.Info("exactly-once: created the state topic", "state_topic", s.topic, "partitions", 1, "replication_factor", rf, "cleanup_policy", compact)
		if rf < 2 {
			log.Warn("exactly-once: the state topic has a single replica, as the cluster has one broker: losing that broker loses the committed positions", "state_topic", s.topic, "replication_factor", rf)
		}
	}
	return nil
}

// check refuses an existing state topic walbox cannot rely on.
func (s *KafkaState) check(ctx context.Context, adm *kadm.Client, d kadm.TopicDetail, log *slog.Logger) error {
	if n := len(d.Partitions); n != 1 {
		return &StateTopicError{Topic: s.topic, Problem: fmt.Sprintf("it has %d partitions, and walbox reads the positions from partition 0 only", n)}
	}
	for _, p := range d.Partitions {
		if rf := len(p.Replicas); rf < 2 {
			log.Warn("exactly-once: the state topic has a single replica: losing its broker loses the committed positions; raise its replication factor (kafka-reassign-partitions)", "state_topic", s.topic, "replication_factor", rf)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, s.topic)
	if err == nil {
		var rc kadm.ResourceConfig
		if rc, err = rcs.On(s.topic, nil); err == nil {
			err = rc.Err
		}
		if err == nil {
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil && *c.Value != "compact" {
					return &StateTopicError{Topic: s.topic, Problem: fmt.Sprintf("its cleanup.policy is %q, which drops positions walbox still needs; only compact keeps each key's last one", *c.Value)}
				}
			}
			return nil
		}
	}
	// Describing configs needs DESCRIBE_CONFIGS; an operator who created
	// the topic may not have granted it. Not knowing is not a refusal.
	log.Warn("exactly-once: could not read the state topic's cleanup.policy; make sure it is compact", "state_topic", s.topic, "err", err)
	return nil
}

// Last returns the last committed position recorded under key.
//
// It reads read_uncommitted up to the high watermark and decides itself
// what is committed, from the transaction markers: a record under key
// counts once its producer's commit marker follows it, and is dropped by an
// abort marker. Reading read_committed up to the last stable offset would
// stop at the first transaction still open on the partition, and the state
// topic is shared: while another walbox's transaction is open (up to its
// transaction timeout), this one would read a position older than its own
// last commit and produce committed transactions again. The caller loads
// the producer id of key's transactional id first, which completes or
// aborts that id's own open transaction, so every record under key before
// the high watermark has its marker. A record under key without one (a
// writer of key that is not walbox's transactional id) is not a position.
//
// It reads backwards in growing windows: the last records first (one walbox
// per transactional id writes one record per transaction, so its last
// position is usually among them), then further back only if key is not
// found there.
func (s *KafkaState) Last(ctx context.Context, key string) (StatePosition, error) {
	var zero StatePosition
	cl, err := kgo.NewClient(s.kc.connOpts()...)
	if err != nil {
		return zero, err
	}
	offsets, err := kadm.NewClient(cl).ListEndOffsets(ctx, s.topic)
	cl.Close()
	if err != nil {
		return zero, fmt.Errorf("list the high watermark of the state topic %q: %w", s.topic, err)
	}
	lo, ok := offsets.Lookup(s.topic, 0)
	if !ok {
		return zero, fmt.Errorf("state topic %q: partition 0 not listed; does the topic exist?", s.topic)
	}
	if lo.Err != nil {
		return zero, fmt.Errorf("list the high watermark of the state topic %q: %w", s.topic, lo.Err)
	}
	end := lo.Offset
	for window := int64(1024); ; window *= 16 {
		from := max(0, end-window)
		pos, found, err := s.read(ctx, key, from, end)
		if err != nil || found || from == 0 {
			return pos, err
		}
	}
}

// read returns the last committed position under key among the offsets
// [from, end); see Last.
func (s *KafkaState) read(ctx context.Context, key string, from, end int64) (StatePosition, bool, error) {
	var pos StatePosition
	found := false
	if from >= end {
		return pos, false, nil
	}
	cl, err := kgo.NewClient(append(s.kc.connOpts(),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
		// Offsets below the log start (deleted or compacted away) reset
		// to the start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return pos, false, err
	}
	defer cl.Close()
	// pending holds, per producer id, the last position under key of its
	// transaction not yet ended by a marker.
	pending := map[int64]StatePosition{}
	next := from
	for next < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return pos, false, fmt.Errorf("read the state topic %q up to offset %d (at %d): %w", s.topic, end, next, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return pos, false, fmt.Errorf("read the state topic %q: %w", s.topic, ferr)
		}
		var derr error
		fs.EachRecord(func(r *kgo.Record) {
			next = max(next, r.Offset+1)
			if r.Offset >= end {
				return
			}
			if r.Attrs.IsControl() {
				p, ok := pending[r.ProducerID]
				if !ok {
					return
				}
				delete(pending, r.ProducerID)
				// The key of a marker: version (int16), type (int16):
				// 0 abort, 1 commit.
				if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 1 {
					pos, found = p, true
				}
				return
			}
			if string(r.Key) != key {
				return
			}
			p, err := decodeState(r.Value)
			if err != nil {
				derr = fmt.Errorf("state topic %q offset %d (key %q): %w; the topic holds records walbox did not write: give --state-topic a topic of walbox's own", s.topic, r.Offset, key, err)
				return
			}
			if !r.Attrs.IsTransactional() {
				pos, found = p, true // no marker will come
				return
			}
			pending[r.ProducerID] = p
		})
		if derr != nil {
			return pos, false, derr
		}
	}
	return pos, found, nil
}

// stateRecord is the record that states, inside a Kafka transaction, the
// position it covers and its history.
func stateRecord(topic, key string, p StatePosition, records int) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: encodeState(p, records)}
}
