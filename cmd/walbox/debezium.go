package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/debezium/eventrouter"
	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/tracing"
)

// debeziumMode is walbox run with --debezium-config: Debezium's
// EventRouter builds the records.
type debeziumMode struct {
	tr *debezium.Translation
	// check is the EventRouter without the catalog's column facts, used
	// to check the outbox tables' columns before the slot is set up.
	check *eventrouter.Router
	// enc holds the schema registry encoders (Values, Keys) when a
	// converter is a registry converter (--value-format, --key-format).
	enc router.Config
}

// newDebeziumMode reads the Debezium configuration again (Load has
// reported its problems), logs the overrides and warnings, and checks the
// EventRouter settings; nil outside Debezium mode.
func newDebeziumMode(cfg config.Config, log *slog.Logger) (*debeziumMode, error) {
	if cfg.DebeziumConfig == "" {
		return nil, nil
	}
	tr, err := cfg.DebeziumTranslation()
	if err != nil {
		return nil, fmt.Errorf("--debezium-config %s: %w", cfg.DebeziumConfig, err)
	}
	for _, o := range cfg.DebeziumOverrides(tr) {
		log.Warn("an explicit option overrides the Debezium configuration", "override", o)
	}
	for _, w := range tr.Warnings {
		log.Warn("a Debezium setting is not applied as Debezium applies it (why says what walbox does)", "key", w.Key, "where", w.Where, "why", w.Why)
	}
	log.Info("Debezium mode", "config", cfg.DebeziumConfig, "connector", tr.Router.ConnectorName, "topic_prefix", tr.Router.LogicalName,
		"tables", cfg.Table, "publication_autocreate_mode", tr.AutocreateMode,
		"key_converter", string(tr.Router.KeyConverter.Kind), "value_converter", string(tr.Router.ValueConverter.Kind))
	d := &debeziumMode{tr: tr}
	if err := d.useRegistry(cfg, nil); err != nil {
		return nil, err
	}
	if d.check, err = eventrouter.New(d.routerConfig(cfg, nil)); err != nil {
		return nil, fmt.Errorf("--debezium-config %s: %w", cfg.DebeziumConfig, err)
	}
	return d, nil
}

// useRegistry builds the schema registry encoders the converters ask for,
// their metrics on reg (none when nil). It makes no registry request.
func (d *debeziumMode) useRegistry(cfg config.Config, reg prometheus.Registerer) error {
	enc, err := withValueEncoder(cfg, router.Config{}, reg)
	if err != nil {
		return fmt.Errorf("--debezium-config %s: %w", cfg.DebeziumConfig, err)
	}
	d.enc = enc
	return nil
}

// routerConfig is the EventRouter's configuration for the effective
// tables (an explicit --table wins over table.include.list).
func (d *debeziumMode) routerConfig(cfg config.Config, cols map[string][]eventrouter.ColumnInfo) eventrouter.Config {
	rc := d.tr.Router
	rc.Tables = nil
	for _, t := range strings.Split(cfg.Table, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if !strings.Contains(t, ".") {
				t = "public." + t
			}
			rc.Tables = append(rc.Tables, t)
		}
	}
	rc.Columns = cols
	rc.Values, rc.Keys = d.enc.Values, d.enc.Keys
	// As Debezium with an OpenTelemetry agent: the row's
	// tracing.span.context.field becomes a traceparent header, which the
	// tracer reads and replaces with its producer span's.
	if s, _, err := tracing.FromEnv(nil, tracing.Config{}); err == nil && s.Enabled {
		rc.TraceContextHeaders = true
	}
	return rc
}

// setup prepares the publication and slot under Debezium's
// publication.autocreate.mode, then reads the outbox tables' column facts
// and returns the EventRouter the relay uses.
func (d *debeziumMode) setup(ctx context.Context, cfg config.Config, log *slog.Logger) (slotctl.SlotInfo, pipeline.Router, error) {
	slot, err := setupSlotWith(ctx, cfg, d.check, func(s *slotctl.Config) { config.DebeziumSlotPolicy(d.tr, s) }, log)
	if err != nil {
		return slot, nil, err
	}
	if cfg.HeartbeatInterval > 0 {
		warnHeartbeatListeners(ctx, cfg, log)
	}
	rt, err := d.router(ctx, cfg, log)
	return slot, rt, err
}

// warnHeartbeatListeners warns when other logical slots of the database
// (other Debezium connectors, during a partial migration) receive walbox's
// heartbeats, which such a connector emits as records unless told not to.
// Listing them is best effort: a failure is only logged.
func warnHeartbeatListeners(ctx context.Context, cfg config.Config, log *slog.Logger) {
	cc, err := cfg.ConnConfig()
	if err != nil {
		return
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		log.Debug("cannot list the database's other logical slots", "err", err)
		return
	}
	defer conn.Close(context.Background())
	others, err := debezium.OtherLogicalSlots(ctx, conn, cfg.Slot)
	if err != nil {
		log.Debug("cannot list the database's other logical slots", "err", err)
		return
	}
	if len(others) > 0 {
		log.Warn("walbox's heartbeats are logical decoding messages, which reach every logical slot of the database: "+
			"a Debezium connector on one of these slots emits each as a record to its <topic.prefix>.message topic; "+
			"set "+debezium.HeartbeatPrefixExclude+" on those connectors, or run walbox with --heartbeat-interval 0 until they are migrated",
			"other_slots", others, "prefix", heartbeat.Prefix)
	}
}

// router reads the outbox tables' column facts and returns the EventRouter.
// `walbox replay` uses it too, so that replayed records are Debezium's.
func (d *debeziumMode) router(ctx context.Context, cfg config.Config, log *slog.Logger) (*eventrouter.Router, error) {
	var cols map[string][]eventrouter.ColumnInfo
	err := retryPostgres(ctx, cfg, log, func() error {
		cc, err := cfg.ConnConfig()
		if err != nil {
			return err
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return fmt.Errorf("connect to postgres: %w", err)
		}
		defer conn.Close(context.Background())
		cols, err = eventrouter.LoadColumns(ctx, conn, d.routerConfig(cfg, nil).Tables)
		return err
	})
	if err != nil {
		return nil, err
	}
	rc := d.routerConfig(cfg, cols)
	// Read again on every Relation message, as Debezium refreshes its
	// table schema: an ALTER TABLE while walbox runs changes the records.
	cc, err := cfg.ConnConfig()
	if err != nil {
		return nil, err
	}
	rc.ReloadColumns = eventrouter.NewCatalogLoader(cc, 30*time.Second).Load
	return eventrouter.New(rc)
}
