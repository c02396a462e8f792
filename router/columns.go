package router

import (
	"errors"
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
// checked. It satisfies slotctl's ColumnChecker.
//
// Each missing column is a *ColumnError, several joined with errors.Join,
// so that a caller can report each under the option that names it; their
// messages name walbox's flags and YAML keys, for the operator who set
// them.
func (r *Router) CheckColumns(table string, columns []string) error {
	type need struct {
		ref   ref
		field Field
		value string // the field's value, as the user wrote it
		what  string // the placeholder, for a template's column
	}
	needs := []need{
		{ref: r.aggID, field: FieldColumnsAggregateID, value: r.cfg.Columns.AggregateID},
		{ref: r.payload, field: FieldColumnsPayload, value: r.cfg.Columns.Payload},
	}
	if r.cfg.Columns.Topic != "" {
		needs = append(needs, need{ref: r.topic, field: FieldColumnsTopic, value: r.cfg.Columns.Topic})
	} else {
		for i, p := range r.tmpl.refs {
			n := need{ref: p, field: FieldTopicTemplate, value: r.cfg.TopicTemplate, what: r.tmpl.names[i]}
			if lf := r.tmpl.logical[i]; lf != "" {
				// Mapped by a --column-* option: that option is what to fix.
				n.field, n.value = lf, p.column
			}
			needs = append(needs, n)
		}
	}
	var errs []error
	for _, n := range needs {
		if !slices.Contains(columns, n.ref.column) {
			errs = append(errs, &ColumnError{
				Field: n.field, Value: n.value, Column: n.ref.column, Table: table, Columns: columns,
				placeholder: n.what, template: r.cfg.TopicTemplate,
			})
		}
	}
	return errors.Join(errs...)
}

// ColumnError is a column the configuration names and the outbox table
// lacks, as CheckColumns reports it. It unwraps to ErrInvalidConfig.
type ColumnError struct {
	// Field is the Config field to fix: a Columns field, or TopicTemplate
	// for a placeholder that names a column directly.
	Field Field
	// Value is that field's value: the column name, or the template.
	Value string
	// Column is the missing column; Table the table as "schema.table";
	// Columns the columns it has.
	Column  string
	Table   string
	Columns []string

	placeholder string // the template's placeholder that needs Column, if any
	template    string
}

// Reason says what is missing, naming the fields it mentions with name
// (their Go names when name is nil), without the field at fault's own
// name when the caller prints it (own false) or with it (own true).
func (e *ColumnError) Reason(name func(Field) string, own bool) string {
	if name == nil {
		name = func(f Field) string { return string(f) }
	}
	var what string
	switch {
	case e.placeholder != "" && e.Field != FieldTopicTemplate:
		what = fmt.Sprintf("the placeholder {%s} of %s %q (the %s field, mapped by %s) names column %q",
			e.placeholder, name(FieldTopicTemplate), e.template, e.placeholder, name(e.Field), e.Column)
	case e.placeholder != "":
		what = fmt.Sprintf("the placeholder {%s} of %s %q names column %q", e.placeholder, name(FieldTopicTemplate), e.template, e.Column)
	case own:
		what = fmt.Sprintf("%s names column %q", name(e.Field), e.Column)
	default:
		what = fmt.Sprintf("column %q", e.Column)
	}
	return fmt.Sprintf("table %s has no such column: %s; its columns are %s", e.Table, what, strings.Join(e.Columns, ", "))
}

// Error names the column, the table and the walbox option that names it.
func (e *ColumnError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Reason(columnOption, true)
}

// Unwrap returns ErrInvalidConfig.
func (e *ColumnError) Unwrap() error { return ErrInvalidConfig }

// columnOption names the walbox option that sets a field, for messages
// read without walbox's own naming.
func columnOption(f Field) string {
	if f == FieldTopicTemplate {
		return "--topic"
	}
	for _, lf := range logicalFields {
		if lf.field == f {
			return "--column-" + strings.ReplaceAll(lf.name, "_", "-") + " (columns." + lf.name + ")"
		}
	}
	return string(f)
}
