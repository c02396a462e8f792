package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/walbox/walbox/config"
)

// printDebezium shows, in Debezium mode, what walbox made of every key of
// the Debezium configuration (secrets redacted), the warnings, and the
// explicit options that win over it. The problems are listed with the
// others.
func printDebezium(w io.Writer, cfg config.Config) {
	if cfg.DebeziumConfig == "" {
		return
	}
	tr, _ := cfg.DebeziumTranslation() // its problems are among the configuration's
	if tr == nil {
		return
	}
	fmt.Fprintf(w, "\nDebezium configuration %s", cfg.DebeziumConfig)
	if cfg.DebeziumWorkerConfig != "" {
		fmt.Fprintf(w, " (worker %s)", cfg.DebeziumWorkerConfig)
	}
	fmt.Fprintln(w, ":")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tWALBOX\tNOTE\tWHERE")
	for _, m := range tr.Mappings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Key, displayValue(m.Value), m.Setting, m.Note, m.Where)
	}
	tw.Flush()
	r := tr.Router
	fmt.Fprintf(w, "\nEventRouter: tables %v, id %q, key %q, payload %q, route by %q, topic %q -> %q, key converter %s, value converter %s (schemas %t), extended headers %t\n",
		r.Tables, r.EventIDColumn, r.EventKeyColumn, r.PayloadColumn, r.RouteByColumn, r.TopicRegex, r.TopicReplacement,
		r.KeyConverter.Kind, r.ValueConverter.Kind, r.ValueConverter.SchemasEnable, r.ExtendedHeaders)
	fmt.Fprintf(w, "publication.autocreate.mode: %s\n", tr.AutocreateMode)
	if len(tr.Warnings) > 0 {
		fmt.Fprintf(w, "\n%d warning(s) (no effect on the records):\n", len(tr.Warnings))
		for _, wa := range tr.Warnings {
			fmt.Fprintf(w, "  - %s\n", wa)
		}
	}
	if ov := cfg.DebeziumOverrides(tr); len(ov) > 0 {
		fmt.Fprintln(w, "\nExplicit options that win over the Debezium configuration:")
		for _, o := range ov {
			fmt.Fprintf(w, "  - %s\n", o)
		}
	}
}
