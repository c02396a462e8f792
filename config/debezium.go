package config

import (
	"fmt"
	"strings"

	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/slotctl"
)

// Debezium mode. --debezium-config names a Kafka Connect configuration of
// Debezium's Postgres connector with the outbox EventRouter; package
// debezium translates it into walbox options and the EventRouter settings.
//
// Precedence: a walbox option given explicitly (flag, environment
// variable or YAML file) wins over the value the Debezium configuration
// maps to it; walbox run logs each such override as a warning
// (DebeziumOverrides) and config check shows the option's source (the
// flag, variable or file instead of the Debezium file). Options that
// decide the records in walbox's own mode (--topic, --column-*,
// --invalid-rows, --dead-letter-topic, --message-prefix) do not apply in
// Debezium mode, where the EventRouter settings decide them: giving one
// explicitly is an error.

func debeziumConfigOption() *option { return optionByFlag("debezium-config") }

// routingOptions are the options Debezium mode replaces.
var routingOptions = []string{
	"topic", "column-id", "column-aggregate-type", "column-aggregate-id", "column-event-type", "column-payload",
	"column-headers", "column-topic", "invalid-rows", "dead-letter-topic", "message-prefix", "message-prefix-allow-public",
	"cloudevents", "cloudevents-source",
}

// DebeziumTranslation reads and translates the files of --debezium-config
// and --debezium-worker-config; nil, nil outside Debezium mode. Load has
// done the same and reported every problem, so on a Config Load returned
// it fails only if the files changed since.
func (c Config) DebeziumTranslation() (*debezium.Translation, error) {
	if c.DebeziumConfig == "" {
		return nil, nil
	}
	conn, err := debezium.ReadFile(c.DebeziumConfig)
	if err != nil {
		return nil, err
	}
	var worker *debezium.Properties
	if c.DebeziumWorkerConfig != "" {
		if worker, err = debezium.ReadFile(c.DebeziumWorkerConfig); err != nil {
			return nil, err
		}
	}
	return debezium.Translate(conn, worker)
}

// DebeziumOverrides lists the options whose effective value differs from
// the one tr maps to them, because they were given explicitly, each as a
// sentence for the log.
func (c Config) DebeziumOverrides(tr *debezium.Translation) []string {
	if tr == nil {
		return nil
	}
	var out []string
	for _, ov := range tr.Options {
		o := optionByFlag(ov.Flag)
		if o == nil || o.value.set == nil {
			continue
		}
		d := c
		if o.value.set(&d, ov.Value) != nil {
			continue
		}
		same := o.value.get(&c) == o.value.get(&d)
		if o.value.raw != nil { // a secret: get redacts both to the same mask
			same = o.value.raw(&c) == o.value.raw(&d)
		}
		if same {
			continue
		}
		have, want := o.value.get(&c), o.value.get(&d)
		if o.redact != nil {
			have, want = o.redact(have), o.redact(want)
		}
		out = append(out, fmt.Sprintf("--%s %s (given explicitly) wins over %s=%s of the Debezium configuration",
			o.flag, have, strings.Join(ov.Keys, ", "), want))
	}
	return out
}

// DebeziumSlotPolicy applies tr's publication.autocreate.mode to s:
// all_tables accepts a publication with other tables (or FOR ALL TABLES);
// disabled and no_tables also never create it; filtered keeps walbox's
// exact check.
func DebeziumSlotPolicy(tr *debezium.Translation, s *slotctl.Config) {
	if tr == nil {
		return
	}
	switch tr.AutocreateMode {
	case debezium.AutocreateAllTables:
		s.OtherTablesOK = true
	case debezium.AutocreateDisabled, debezium.AutocreateNoTables:
		s.OtherTablesOK, s.NoCreatePublication = true, true
	}
}

// applyDebezium reads and translates the Debezium files named by c and
// sets the options they map that were not given explicitly. where holds
// the options given explicitly (and receives the ones set here, with the
// Debezium file and keys as their source).
func applyDebezium(c *Config, where map[*option]string, set func(o *option, v, from string, shapeErr error) error) []error {
	if c.DebeziumConfig == "" {
		return nil
	}
	dopt := debeziumConfigOption()
	conn, err := debezium.ReadFile(c.DebeziumConfig)
	if err != nil {
		return []error{dopt.errorFor(c.DebeziumConfig, badf("%v", err), where[dopt])}
	}
	var worker *debezium.Properties
	if c.DebeziumWorkerConfig != "" {
		wopt := optionByFlag("debezium-worker-config")
		if worker, err = debezium.ReadFile(c.DebeziumWorkerConfig); err != nil {
			return []error{wopt.errorFor(c.DebeziumWorkerConfig, badf("%v", err), where[wopt])}
		}
	}
	tr, terr := debezium.Translate(conn, worker)
	var errs []error
	if terr != nil {
		errs = append(errs, problemf(terr, "--debezium-config %s: %v", c.DebeziumConfig, terr))
	}
	for _, name := range routingOptions {
		o := optionByFlag(name)
		if from, ok := where[o]; ok {
			errs = append(errs, problemf(nil, "--%s (%s) does not apply with --debezium-config: the EventRouter settings of %s decide the records; remove it",
				o.flag, sourceName(o, from), c.DebeziumConfig))
		}
	}
	if c.Snapshot != "" && c.Snapshot != "none" {
		errs = append(errs, problemf(nil, "--snapshot %s does not apply with --debezium-config: walbox takes over Debezium's slot and sends Debezium's records, not walbox's; remove it", c.Snapshot))
	}
	// The formats follow the converters in Debezium mode: an explicit
	// --value-format or --key-format with a converter that uses no
	// registry would leave the records to the converter.
	for _, f := range []struct {
		flag, key string
		encodes   bool
	}{{"value-format", "value.converter", c.encodesValues()}, {"key-format", "key.converter", c.EncodesKeys()}} {
		o := optionByFlag(f.flag)
		from, explicit := where[o]
		if _, mapped := tr.Option(f.flag); explicit && !mapped && f.encodes {
			errs = append(errs, problemf(nil, "--%s (%s) does not apply with --debezium-config: %s of %s decides the format; "+
				"set %s to a schema registry converter (such as io.confluent.connect.avro.AvroConverter), or remove --%s",
				o.flag, sourceName(o, from), f.key, c.DebeziumConfig, f.key, o.flag))
		}
	}
	for _, ov := range tr.Options {
		o := optionByFlag(ov.Flag)
		if o == nil {
			errs = append(errs, fmt.Errorf("config: the Debezium translation sets an unknown option %q", ov.Flag)) // a programming error
			continue
		}
		if _, explicit := where[o]; explicit {
			continue // reported by DebeziumOverrides
		}
		if err := set(o, ov.Value, "debezium "+c.DebeziumConfig+" ("+strings.Join(ov.Keys, ", ")+")", nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// sourceName names where an explicit option came from.
func sourceName(o *option, from string) string {
	switch from {
	case "":
		return "flag"
	case "environment":
		return o.env
	}
	return from
}

// checkDebeziumConfig reports nothing itself: applyDebezium reports what
// the files hold, under --debezium-config.
func checkDebeziumConfig(*Config) error { return nil }
