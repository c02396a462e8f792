package router

import (
	"fmt"
	"slices"
	"strings"
)

// CheckColumns reports the configured names a table with the given columns
// lacks, so walbox can refuse to start on a mismatch instead of failing on
// the first row. The aggregate id, the payload, the topic column and every
// topic template placeholder are required; the id, event type and headers
// columns are optional by design (no header then), so they are not checked.
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
		for _, p := range r.tmpl.refs {
			needs = append(needs, need{p, fmt.Sprintf("the placeholder {%s} of --topic %q", p.spec, r.cfg.TopicTemplate)})
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
