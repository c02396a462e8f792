package router

import (
	"fmt"
	"slices"
	"strings"
)

// CheckColumns reports the configured names a table with the given columns
// lacks, so walbox can refuse to start on a mismatch instead of failing on
// the first row. The aggregate id, the payload, the topic column and every
// topic template placeholder (resolved to its column: {aggregate_type} is the
// column Columns.AggregateType names) are required; the id, event type and
// headers columns are optional by design (no header then), so they are not
// checked. It satisfies slotctl's ColumnChecker. The messages name walbox's
// flags and YAML keys, for the operator who set them.
func (r *Router) CheckColumns(table string, columns []string) error {
	type need struct {
		ref    ref
		option string
	}
	needs := []need{
		{r.aggID, "--column-aggregate-id (columns.aggregate_id)"},
		{r.payload, "--column-payload (columns.payload)"},
	}
	if r.cfg.Columns.Topic != "" {
		needs = append(needs, need{r.topic, "--column-topic (columns.topic)"})
	} else {
		for i, p := range r.tmpl.refs {
			what := fmt.Sprintf("the placeholder {%s} of --topic %q", r.tmpl.names[i], r.cfg.TopicTemplate)
			if r.tmpl.logical[i] != "" {
				what += fmt.Sprintf(" (the %s field, mapped by %s)", r.tmpl.names[i], columnOption(r.tmpl.logical[i]))
			}
			needs = append(needs, need{p, what})
		}
	}
	var missing []string
	for _, n := range needs {
		if !slices.Contains(columns, n.ref.column) {
			missing = append(missing, fmt.Sprintf("%s names column %q", n.option, n.ref.column))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: table %s has no such column: %s; its columns are %s",
		ErrInvalidConfig, table, strings.Join(missing, "; "), strings.Join(columns, ", "))
}

// columnOption names the walbox option that sets a Columns field.
func columnOption(f Field) string {
	for _, lf := range logicalFields {
		if lf.field == f {
			return "--column-" + strings.ReplaceAll(lf.name, "_", "-") + " (columns." + lf.name + ")"
		}
	}
	return string(f)
}
