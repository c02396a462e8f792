package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/internal/connerr"
	"github.com/walbox/walbox/internal/version"
	"github.com/walbox/walbox/kafkasec"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/tracing"
	"github.com/walbox/walbox/tracing/otlp"
)

// runRelay wires the relay together and runs it until ctx ends. Shutdown
// order: the relay stops reading WAL, drains in-flight acks and sends its
// final status update; then the Kafka client and the metrics server close.
func runRelay(ctx context.Context, cfg config.Config, logOut io.Writer) (err error) {
	return runRelayWith(ctx, cfg, newLogger(cfg, logOut), runOptions{})
}

// runOptions change what runRelay does, for walbox migrate-from-debezium.
type runOptions struct {
	// start, when set, is called once the slot is set up and returns where
	// streaming starts (at least the slot's confirmed position).
	start func(ctx context.Context, slot slotctl.SlotInfo) (pglogrepl.LSN, error)
	// wrap, when set, is called after start and may wrap the router and
	// the producer the relay uses.
	wrap func(rt pipeline.Router, p pipeline.Producer) (pipeline.Router, pipeline.Producer)
}

func runRelayWith(ctx context.Context, cfg config.Config, log *slog.Logger, opts runOptions) (err error) {
	// A fatal error is one structured log line here and one plain line on
	// stderr from main: the log for collectors, stderr for whoever ran it.
	defer func() {
		if err != nil {
			log.Error("fatal", "err", connerr.Describe(err))
		}
	}()
	build := version.Get()
	log.Info("starting", "version", build.Version, "revision", build.Revision, "modified", build.Modified, "config", fmt.Sprintf("%+v", cfg.Redacted()))

	// Debezium mode (--debezium-config) routes with Debezium's EventRouter;
	// wrt, walbox's own router, is nil then.
	dbz, err := newDebeziumMode(cfg, log)
	if err != nil {
		return err
	}
	warnTransport(cfg, dbz, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := version.Register(reg, build); err != nil {
		return err
	}
	// Off unless an OTEL_EXPORTER_OTLP_ENDPOINT is set. Shut down last, so
	// the spans of records settled while stopping are exported too.
	tracer, err := otlp.New(ctx, cfg.TracingConfig(), nil, log, reg)
	if err != nil {
		return err
	}
	defer shutdownTracer(tracer, log)

	var (
		rt         pipeline.Router
		wrt        *router.Router
		registries []registryState // for /readyz
	)
	if dbz != nil {
		// The relay's EventRouter encodes with metrics on reg.
		if err := dbz.useRegistry(cfg, reg); err != nil {
			return err
		}
		registries = encoderStates(dbz.enc)
	} else {
		rc, err := withValueEncoder(cfg, cfg.RouterConfig(), reg)
		if err != nil {
			return err
		}
		registries = encoderStates(rc)
		if wrt, err = router.New(rc); err != nil {
			return err
		}
		rt = wrt
	}

	kc, err := kafkaConfig(cfg, log)
	if err != nil {
		return err
	}
	if kc.BatchMaxBytes, err = effectiveBatchMax(ctx, kc, cfg.KafkaSecurity, log); err != nil {
		return err
	}
	// Each topic's max.message.bytes, looked up when the topic is first
	// seen: the relay refuses an oversized record before producing it, in
	// stream order, and batches stay within the topic's limit.
	limits := pipeline.NewKafkaTopicLimits()
	kc.MaxBufferedRecords = cfg.MaxInflightRecords + 1
	kc.TopicLimits = limits
	pcfg := cfg.PipelineConfig()
	pcfg.Tracer = tracer
	// In exactly-once mode the relay's transactional client carries the
	// walbox_kafka_ metrics; kcl only serves the snapshot and /readyz.
	kreg := prometheus.Registerer(reg)
	if cfg.Delivery == pipeline.DeliveryExactlyOnce {
		kreg = nil
	}
	kcl, err := pipeline.NewKafkaClient(kc, log, kreg)
	if err != nil {
		return err
	}
	defer kcl.Close()
	var relayProducer pipeline.Producer = kcl
	tcl, closeTxn, err := exactlyOnce(ctx, cfg, kc, &pcfg, log, reg)
	if err != nil {
		return err
	}
	if tcl != nil {
		defer closeTxn()
		relayProducer = tcl
	}

	// After the Kafka client: a takeover (--snapshot) produces the
	// snapshot's rows with it before streaming starts.
	var slot slotctl.SlotInfo
	if dbz != nil {
		slot, rt, err = dbz.setup(ctx, cfg, log)
	} else {
		slot, err = setupSlotOrTakeover(ctx, cfg, wrt, kcl, tracer, log)
	}
	if err != nil {
		if ctx.Err() != nil { // stopped while waiting for Postgres
			return nil
		}
		return err
	}

	start := slot.ConfirmedFlushLSN
	if opts.start != nil {
		if start, err = opts.start(ctx, slot); err != nil {
			return err
		}
	}
	if dbz != nil {
		// Debezium's table.op.invalid.behavior, for the updates its
		// publications carry.
		pcfg.OutboxUpdates = dbz.tr.Router.OpInvalidBehavior
	}
	pcfg.MaxBatchBytes = kc.BatchMaxBytes
	pcfg.TopicLimits = limits
	var relay *pipeline.Relay
	hb, err := newHeartbeat(cfg, func() bool { return relay.Streaming() }, reg, log)
	if err != nil {
		return err
	}
	if hb != nil {
		hb.WatchStandby(func() bool { return relay.Standby() })
		pcfg.OnHeartbeat = hb.Seen
	}
	producer := relayProducer
	if opts.wrap != nil {
		rt, producer = opts.wrap(rt, producer)
	}
	relay, err = pipeline.New(pcfg, producer, rt, reg, log)
	if err != nil {
		return err
	}

	keeper, err := newKeeper(cfg, relay, reg, log)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	var waits standbyWaits
	if hb != nil {
		waits = hb
	}
	srv, err := startMetricsServer(cfg.MetricsAddr, reg, relay, kcl, waits, log, registries...)
	if err != nil {
		return err
	}
	if srv != nil {
		g.Go(func() error {
			if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics server on %s: %w", cfg.MetricsAddr, err)
			}
			return nil
		})
	}
	if keeper != nil {
		g.Go(func() error { return keeper.Run(gctx) })
	}
	if cfg.MessagePrefix != "" {
		g.Go(func() error { return watchEmitPrivilege(gctx, cfg, emitGuardInterval, log) })
	}
	if hb != nil {
		g.Go(func() error { return hb.Run(gctx) })
	}
	if cfg.FailoverSlot {
		g.Go(func() error { watchStandbyCopies(gctx, cfg, standbyCopiesInterval, log); return nil })
	}
	g.Go(func() error {
		defer func() {
			if srv != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}
		}()
		return relay.Run(gctx, start)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

// setupSlot checks the server and prepares the publication and slot (see
// slotctl.Setup). A missing slot is created only on a first start, or with
// --create-slot; retries while Postgres is unreachable.
func setupSlot(ctx context.Context, cfg config.Config, rt *router.Router, log *slog.Logger) (slotctl.SlotInfo, error) {
	return setupSlotWith(ctx, cfg, rt, nil, log)
}

// setupSlotWith is setupSlot with any column checker (Debezium mode's
// EventRouter) and, when policy is not nil, a change to slotctl's
// settings (Debezium's publication.autocreate.mode).
func setupSlotWith(ctx context.Context, cfg config.Config, cols slotctl.ColumnChecker, policy func(*slotctl.Config), log *slog.Logger) (slotctl.SlotInfo, error) {
	scfg := runSlotctlConfig(cfg, cols, policy)
	_, slot, err := slotctl.Setup(ctx, cfg.PGDSN, scfg, slotctl.SetupOptions{
		Logger:    log,
		Retryable: pipeline.IsRetryable,
		Backoff: func(attempt int) time.Duration {
			return pipeline.Backoff(attempt, cfg.ReconnectBackoffMin, cfg.ReconnectBackoffMax)
		},
		CheckEmitMessage:       cfg.MessagePrefix != "",
		AllowPublicEmitMessage: cfg.MessagePrefixAllowPublic,
		ReplaySlot:             replaySlotInUse(cfg),
	})
	return slot, err
}

// effectiveBatchMax caps --producer-batch-max-bytes at the brokers'
// message.max.bytes, so an oversized record is refused alone instead of
// taking its batch down with it. If the brokers cannot be asked (down,
// or no DescribeConfigs permission), the flag's value stands.
//
// It is also walbox's first connection to Kafka: a certificate or SASL
// failure stops walbox with the option to fix (sec.AuthFailure), since
// retrying cannot help.
func effectiveBatchMax(ctx context.Context, kc pipeline.KafkaConfig, sec kafkasec.Config, log *slog.Logger) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	limit, err := pipeline.BrokerMessageMaxBytes(qctx, kc)
	if af := sec.AuthFailure(err); af != nil {
		return 0, af
	}
	if err != nil {
		log.Warn("could not read the brokers' message.max.bytes; keeping --producer-batch-max-bytes",
			"err", err, "producer_batch_max_bytes", kc.BatchMaxBytes)
		return kc.BatchMaxBytes, nil
	}
	if limit < kc.BatchMaxBytes {
		log.Info("capping the producer batch size at the brokers' message.max.bytes",
			"message_max_bytes", limit, "producer_batch_max_bytes", kc.BatchMaxBytes)
		return limit, nil
	}
	return kc.BatchMaxBytes, nil
}

func newLogger(cfg config.Config, out io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(out, opts))
	}
	return slog.New(slog.NewJSONHandler(out, opts))
}

type metricsServer struct {
	*http.Server
	ln net.Listener
}

func (s *metricsServer) Serve() error { return s.Server.Serve(s.ln) }

// startMetricsServer binds before returning so a port clash is a startup
// error, not a log line later. An empty addr disables it.
func startMetricsServer(addr string, reg *prometheus.Registry, relay *pipeline.Relay, kafka kafkaPinger, waits standbyWaits, log *slog.Logger, registries ...registryState) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s: %w (set --metrics-addr / WALBOX_METRICS_ADDR to a free address, or empty to disable)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", healthz)
	ready := newReadiness(relay, kafka, log)
	ready.waits = waits
	ready.registries = registries
	mux.Handle("/readyz", ready)
	return &metricsServer{Server: newHTTPServer(mux, metricsHTTPLimits), ln: limitListener(ln, metricsHTTPLimits.maxConns)}, nil
}

// shutdownTracer exports the spans still queued, for at most 5 s: a
// collector that is down must not hold up the stop.
func shutdownTracer(t *tracing.Tracer, log *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans still queued at stop were not exported", "err", err)
	}
}
