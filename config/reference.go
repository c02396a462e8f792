package config

import (
	"fmt"
	"io"
	"strings"
)

// referenceIntro is how the options are given, for the top of the
// reference; it says what usageHeader says, in Markdown.
const referenceIntro = `Each option can be given as a flag (` + "`--name value` or `--name=value`" + `), as an
environment variable, or as a key of the YAML file named by ` + "`--config` or `WALBOX_CONFIG`" + `.
Flags override environment variables, which override the file, which overrides
the defaults. An empty environment variable counts as unset. A flag given twice
keeps its last value, except list options, whose values add up. Durations are Go
durations (` + "`500ms`, `1s`, `2m`" + `); sizes are bytes with an optional unit (` + "`KiB`, `MiB`,\n`GiB`, or the decimal `KB`, `MB`, `GB`" + `). A YAML key written with a dot is
nested: ` + "`columns.payload` is `payload:` under `columns:`" + `.
`

// WriteReference writes the Markdown reference of every option of the
// table: for each group (Postgres, Kafka, Routing, Operations) a section,
// and for each option its flag, environment variable, YAML key, value
// kind, default (or "required"), what is accepted and its help text.
// Headings start at level h (2 for "##"). The output depends only on the
// table and Defaults, never on the machine, so it can be committed and
// compared byte for byte.
func WriteReference(out io.Writer, h int) {
	var b strings.Builder
	b.WriteString(referenceIntro)
	defaults := Defaults()
	for g, name := range groupNames {
		fmt.Fprintf(&b, "\n%s %s\n", strings.Repeat("#", h), name)
		for _, o := range referenceOptions() {
			if o.group != group(g) {
				continue
			}
			writeReferenceOption(&b, o, &defaults, h+1)
		}
	}
	_, _ = io.WriteString(out, b.String())
}

// referenceOptions is the table with --config, which has no field, in the
// Operations group where Usage shows it too.
func referenceOptions() []*option {
	return append(append([]*option{}, options...), configOption)
}

func writeReferenceOption(b *strings.Builder, o *option, defaults *Config, h int) {
	fmt.Fprintf(b, "\n%s `--%s`\n\n%s.\n\n", strings.Repeat("#", h), o.flag, mdEscape(o.help))
	b.WriteString("| | |\n|---|---|\n")
	fmt.Fprintf(b, "| Flag | `--%s %s` |\n", o.flag, o.value.arg)
	fmt.Fprintf(b, "| Environment | `%s` |\n", o.env)
	if o.yaml != "" {
		fmt.Fprintf(b, "| YAML key | `%s` |\n", o.yaml)
	} else {
		b.WriteString("| YAML key | (none: only a flag or the environment) |\n")
	}
	switch def := o.value.get(defaults); {
	case isRequired(o, defaults):
		b.WriteString("| Default | required |\n")
	case def == "":
		b.WriteString("| Default | empty |\n")
	default:
		fmt.Fprintf(b, "| Default | `%s` |\n", strings.ReplaceAll(def, "|", `\|`))
	}
	if accepts := referenceAccepts(o); accepts != "" {
		fmt.Fprintf(b, "| Accepts | %s |\n", mdCell(accepts))
	}
	if o.redact != nil || strings.Contains(o.flag, "password") {
		b.WriteString("| Secret | yes: redacted in logs, errors and `walbox config check` |\n")
	}
}

// referenceAccepts says what a value of o looks like, from its parser.
func referenceAccepts(o *option) string {
	e := o.value.expect
	if e == "" || e == "expected a string" {
		return ""
	}
	e = strings.TrimPrefix(e, "expected ")
	return strings.ToUpper(e[:1]) + e[1:]
}

// mdEscape keeps text from being read as Markdown markup.
func mdEscape(s string) string {
	return strings.NewReplacer("<", `\<`, ">", `\>`, "*", `\*`).Replace(s)
}

// mdCell is mdEscape for a table cell, where | ends the cell.
func mdCell(s string) string {
	return strings.ReplaceAll(mdEscape(s), "|", `\|`)
}
