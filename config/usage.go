package config

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

const usageHeader = `Usage: walbox run [options]

Streams the rows inserted into the outbox table, read through Postgres logical
replication (pgoutput), to Kafka.

Each option can be given as a flag (--name value or --name=value), as an
environment variable, or as a key of the YAML file named by --config or
WALBOX_CONFIG. Flags override environment variables, which override the file,
which overrides the defaults. An empty environment variable counts as unset.
Durations are Go durations (500ms, 1s, 2m); sizes are bytes with an optional
unit (KiB, MiB, GiB, or the decimal KB, MB, GB).
`

// Usage writes the help of `walbox run` to out: every option with its flag,
// environment variable, YAML key, default and a one-line description,
// grouped under Postgres, Kafka, Routing and Operations.
func Usage(out io.Writer) {
	var b strings.Builder
	b.WriteString(usageHeader)
	writeOptions(&b, nil)
	_, _ = io.WriteString(out, b.String())
}

// WriteOptions writes the options cmd uses as Usage does, grouped and with
// their environment variables, YAML keys and defaults, for the command's
// own help text.
func (cmd Command) WriteOptions(out io.Writer) {
	use, err := cmd.use()
	if err != nil {
		panic(err) // a Command naming an unknown option is a programming error
	}
	var b strings.Builder
	writeOptions(&b, use)
	_, _ = io.WriteString(out, b.String())
}

func writeOptions(b *strings.Builder, use map[*option]bool) {
	defaults := Defaults()
	for g, name := range groupNames {
		header := false
		for _, o := range options {
			if o.group != group(g) || (use != nil && !use[o]) {
				continue
			}
			if !header {
				fmt.Fprintf(b, "\n%s:\n", name)
				header = true
			}
			fmt.Fprintf(b, "  --%s %s", o.flag, o.value.arg)
			switch def := o.value.get(&defaults); {
			case isRequired(o, &defaults):
				b.WriteString("  (required)")
			case def != "":
				fmt.Fprintf(b, "  (default %s)", def)
			}
			fmt.Fprintf(b, "\n      %s\n", o.help)
			yamlKey := o.yaml
			if yamlKey == "" {
				yamlKey = "(none)"
			}
			fmt.Fprintf(b, "      env: %s   yaml: %s\n", o.env, yamlKey)
		}
	}
}

// isRequired reports whether the default value of o is missing, so that
// "required" in the help comes from the same check that enforces it.
func isRequired(o *option, defaults *Config) bool {
	if o.check == nil {
		return false
	}
	for _, err := range splitJoined(o.check(defaults)) {
		var ce *checkErr
		if errors.As(err, &ce) && ce.missing {
			return true
		}
	}
	return false
}
