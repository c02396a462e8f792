package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are registered on the registry the caller injects, never the global
// one, so tests and embedders can run several relays in one process.
type metrics struct {
	eventsProduced     prometheus.Counter
	eventsDeadLettered prometheus.Counter
	duplicatesSkipped  prometheus.Counter
	produceErrors      prometheus.Counter
	transactions       prometheus.Counter
	reconnects         prometheus.Counter
	confirmedLSN       prometheus.Gauge
	receivedLSN        prometheus.Gauge
	inflightRecords    prometheus.GaugeFunc
	inflightBytes      prometheus.GaugeFunc
	commitToAck        prometheus.Histogram
	lastAck            prometheus.Gauge
	streaming          prometheus.Gauge
	standby            prometheus.Gauge
	// nonTransactionalSkipped is walbox_messages_skipped_total's one
	// reason so far; the label keeps room for others without renaming.
	nonTransactionalSkipped prometheus.Counter
	foreignChanges          prometheus.Counter
	outboxUpdates           prometheus.Counter
	failoverErased          prometheus.Counter
	replicationStalls       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, inf *inflight) *metrics {
	f := promauto.With(reg)
	skipped := f.NewCounterVec(prometheus.CounterOpts{
		Name: "walbox_messages_skipped_total",
		Help: "Outbox messages (pg_logical_emit_message with the configured prefix) neither routed nor dead-lettered, by reason: non_transactional (emitted outside a transaction, with no dead-letter topic set).",
	}, []string{"reason"})
	return &metrics{
		nonTransactionalSkipped: skipped.WithLabelValues("non_transactional"),
		foreignChanges: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_foreign_changes_total",
			Help: "Inserts into tables of the publication that are not the outbox tables, not routed.",
		}),
		outboxUpdates: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_outbox_updates_total",
			Help: "UPDATEs of an outbox table received; never routed (see Config.OutboxUpdates for what else they do).",
		}),
		failoverErased: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_failover_erased_events_total",
			Help: "Records walbox had sent to Kafka for transactions that a failover (or point-in-time recovery) erased: committed on the old timeline after the switch point, absent from the new primary. Consumers may need to compensate for them.",
		}),
		replicationStalls: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_replication_stalls_total",
			Help: "Replication sessions given up because the walsender was blocked writing to walbox while nothing arrived (stallwatch.go).",
		}),
		eventsProduced: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_events_produced_total",
			Help: "Outbox events acknowledged by Kafka, dead-lettered ones included.",
		}),
		eventsDeadLettered: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_events_dead_lettered_total",
			Help: "Records routed to the dead-letter topic and acknowledged: invalid rows, records Kafka refuses, non-transactional outbox messages.",
		}),
		duplicatesSkipped: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_events_duplicate_skipped_total",
			Help: "Events re-sent by Postgres after a reconnect that Kafka had already acknowledged, recognised by commit LSN and position in the transaction and not produced again.",
		}),
		produceErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_produce_errors_total",
			Help: "Records Kafka refused for good.",
		}),
		transactions: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_transactions_total",
			Help: "Transactions received from the replication slot.",
		}),
		reconnects: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_postgres_reconnects_total",
			Help: "Replication sessions that ended in a retryable error and were restarted.",
		}),
		confirmedLSN: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_confirmed_lsn_bytes",
			Help: "WAL position last confirmed to Postgres (flush LSN), in bytes.",
		}),
		receivedLSN: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_received_lsn_bytes",
			Help: "End of the WAL last received from Postgres, in bytes.",
		}),
		inflightRecords: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walbox_inflight_records",
			Help: "Records handed to the producer and not yet acknowledged.",
		}, func() float64 { return float64(inf.records.Load()) }),
		inflightBytes: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walbox_inflight_bytes",
			Help: "Bytes of records handed to the producer and not yet acknowledged.",
		}, func() float64 { return float64(inf.bytes.Load()) }),
		commitToAck: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "walbox_commit_to_ack_seconds",
			Help:    "Time from a transaction's Postgres commit to Kafka's acknowledgement of its last event.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		lastAck: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_last_ack_timestamp_seconds",
			Help: "Unix time of the last Kafka acknowledgement.",
		}),
		streaming: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_streaming",
			Help: "1 while a replication session is streaming, 0 while connecting or retrying.",
		}),
		standby: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_standby",
			Help: "1 while this instance (--standby) waits for the slot another instance holds, else 0.",
		}),
	}
}
