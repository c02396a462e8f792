package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
)

// crashAtEnv names the crash-test hook's environment variable; see
// crashHook.
const crashAtEnv = "WALBOX_TEST_CRASH_AT"

// exactlyOnce prepares --delivery=exactly-once: a transactional client of
// the relay's own (the plain client keeps serving the snapshot takeover,
// which produces outside transactions, and /readyz), the state store, and
// the crash-test hook when crashAtEnv is set. In at-least-once mode it
// returns nil and leaves pcfg alone. The relay replaces the client for each
// later session (pipeline.Config.NewTxnProducer) and closes the ones it
// replaces; the returned close func closes the one in use last.
//
// It refuses a --transaction-timeout above the brokers'
// transaction.max.timeout.ms; if the brokers cannot be asked, it warns and
// goes on (the producer id load then fails with the broker's error).
func exactlyOnce(ctx context.Context, cfg config.Config, kc pipeline.KafkaConfig, pcfg *pipeline.Config, log *slog.Logger, reg prometheus.Registerer) (*kgo.Client, func(), error) {
	if cfg.Delivery != pipeline.DeliveryExactlyOnce {
		return nil, func() {}, nil
	}
	hook, err := crashHook(os.Getenv(crashAtEnv), killSelf)
	if err != nil {
		return nil, nil, err
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = pipeline.CheckTransactionTimeout(qctx, kc, cfg.TransactionTimeout)
	cancel()
	if errors.Is(err, pipeline.ErrTransactionTimeout) {
		return nil, nil, err
	}
	if err != nil {
		log.Warn("could not read the brokers' transaction.max.timeout.ms to check --transaction-timeout against it", "err", err,
			"transaction_split_records", cfg.TransactionSplitRecords, "transaction_timeout", cfg.TransactionTimeout.String())
	}
	kc.TransactionalID = pcfg.TransactionalIDOrDefault()
	kc.TransactionTimeout = cfg.TransactionTimeout
	// Room for the state record on top of the in-flight limit.
	kc.MaxBufferedRecords = cfg.MaxInflightRecords + 2
	cl, err := pipeline.NewKafkaClient(kc, log, reg)
	if err != nil {
		return nil, nil, err
	}
	// Each new client attaches the topic limits to itself, as the first
	// did; the relay builds it after closing the previous one, which
	// also unregisters that one's walbox_kafka_ metrics.
	var current atomic.Pointer[kgo.Client]
	current.Store(cl)
	tkc := kc // the state store's copy below drops the topic limits
	pcfg.NewTxnProducer = func() (pipeline.TxnProducer, error) {
		next, err := pipeline.NewKafkaClient(tkc, log, reg)
		if err != nil {
			return nil, err
		}
		current.Store(next)
		return next, nil
	}
	kc.TopicLimits = nil
	pcfg.State = pipeline.NewKafkaState(kc, cfg.StateTopic)
	pcfg.TxnPhase = hook
	log.Info("exactly-once delivery", "transactional_id", kc.TransactionalID, "state_topic", cfg.StateTopic,
		"transaction_max_records", cfg.TransactionMaxRecords, "transaction_max_interval", cfg.TransactionMaxInterval.String(),
		"transaction_split_records", cfg.TransactionSplitRecords, "transaction_timeout", cfg.TransactionTimeout.String())
	return cl, func() { current.Load().Close() }, nil
}

// crashHook is a TEST HOOK for the exactly-once crash tests, not a
// feature: with WALBOX_TEST_CRASH_AT=<phase>:<n> (phase produced, committed
// or confirmed; see pipeline.PhaseProduced and the others; n from 1) walbox
// SIGKILLs itself at the n-th time its relay reaches that phase of a Kafka
// transaction, so a test can kill it exactly between produce and commit,
// between commit and slot confirm, or after the confirm. An empty spec
// returns a nil hook: none is installed.
func crashHook(spec string, kill func()) (func(string), error) {
	if spec == "" {
		return nil, nil
	}
	phase, count, ok := strings.Cut(spec, ":")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 ||
		(phase != pipeline.PhaseProduced && phase != pipeline.PhaseCommitted && phase != pipeline.PhaseConfirmed) {
		return nil, fmt.Errorf("%s=%q: expected <phase>:<n> with phase %s, %s or %s and n >= 1 (a test hook; unset it in production)",
			crashAtEnv, spec, pipeline.PhaseProduced, pipeline.PhaseCommitted, pipeline.PhaseConfirmed)
	}
	var seen atomic.Int64
	return func(p string) {
		if p != phase || seen.Add(1) != int64(n) {
			return
		}
		fmt.Fprintf(os.Stderr, "walbox: %s=%s: killing myself at phase %s\n", crashAtEnv, spec, p)
		kill()
	}, nil
}

// killSelf SIGKILLs the process and does not return.
func killSelf() {
	self, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = self.Kill() // SIGKILL on Unix
	}
	if err != nil {
		os.Exit(137)
	}
	select {} // the signal is on its way
}
