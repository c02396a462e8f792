package config

import (
	"regexp"
	"strings"
	"testing"
)

// TestUsageListsEveryOption checks that the help shows, for every entry of
// the options table, its flag, environment variable, YAML key, default and
// help line, under its group.
func TestUsageListsEveryOption(t *testing.T) {
	var b strings.Builder
	Usage(&b)
	out := b.String()
	defaults := Defaults()
	for _, o := range options {
		t.Run(o.flag, func(t *testing.T) {
			// The option's block: from its flag line to the next blank or flag line.
			i := strings.Index(out, "\n  --"+o.flag+" ")
			if i < 0 {
				t.Fatalf("Usage does not list --%s", o.flag)
			}
			block := out[i+1:]
			if j := strings.Index(block[1:], "\n  --"); j >= 0 {
				block = block[:j+1]
			}
			want := []string{o.env, o.help}
			if o.yaml != "" {
				want = append(want, "yaml: "+o.yaml)
			}
			if def := o.value.get(&defaults); def != "" {
				want = append(want, "(default "+def+")")
			}
			for _, w := range want {
				if !strings.Contains(block, w) {
					t.Errorf("Usage block of --%s lacks %q:\n%s", o.flag, w, block)
				}
			}
			// Under its group: the last group heading before the option.
			heading := regexp.MustCompile(`(?m)^(\w+):$`).FindAllStringSubmatch(out[:i], -1)
			if len(heading) == 0 || heading[len(heading)-1][1] != groupNames[o.group] {
				t.Errorf("--%s is not under %q", o.flag, groupNames[o.group])
			}
		})
	}
	for _, flag := range []string{"pg-dsn", "kafka-brokers"} {
		if !regexp.MustCompile(`--` + flag + ` \w+  \(required\)`).MatchString(out) {
			t.Errorf("Usage does not mark --%s required", flag)
		}
	}
}

// TestOptionTable checks the table's own consistency: unique names, names
// that follow the conventions, and a help line for each.
func TestOptionTable(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range options {
		for _, name := range []string{"--" + o.flag, o.env, "yaml:" + o.yaml} {
			if name != "yaml:" && seen[name] {
				t.Errorf("%s is declared twice", name)
			}
			seen[name] = true
		}
		if want := "WALBOX_" + strings.ToUpper(strings.ReplaceAll(o.flag, "-", "_")); o.env != want {
			t.Errorf("--%s: env %s, want %s", o.flag, o.env, want)
		}
		if o.yaml != "" {
			// kafka-client-id -> kafka_client_id; column-id -> columns.id.
			flat := strings.Replace(strings.ReplaceAll(o.yaml, ".", "_"), "columns_", "column_", 1)
			if flat != strings.ReplaceAll(o.flag, "-", "_") {
				t.Errorf("--%s: YAML key %s does not follow the flag name", o.flag, o.yaml)
			}
		}
		if o.help == "" || strings.HasSuffix(o.help, ".") || strings.Contains(o.help, "\n") {
			t.Errorf("--%s: help must be one line without a final period: %q", o.flag, o.help)
		}
		if o.value.get == nil || (o.value.set == nil && o != configOption) {
			t.Errorf("--%s: value has no get or set", o.flag)
		}
		if o.check == nil && o.router == "" && o.slotctl == nil && o.pipeline == nil && o != configOption {
			t.Errorf("--%s: nothing checks it: no check and no owner package", o.flag)
		}
	}
}

// TestEveryFieldHasAnOption sets each option through Load and checks that
// every Config field was changed by exactly one option, so that a field
// added without an option entry is caught.
func TestEveryFieldHasAnOption(t *testing.T) {
	sample := map[string]string{
		"DSN": "host=other", "LIST": "other:1", "NAME": "other", "URI": "/other", "DURATION": "7s",
		"SIZE": "7KiB", "N": "7", "TEMPLATE": "other", "MODE": "dead-letter", "ADDR": ":7",
		"LEVEL": "debug", "FORMAT": "text", "BOOL": "true",
		"SQL": "sent_at IS NULL", "COLUMNS": "created_at,id",
		"FILE": "/other", "SECRET": "other", "MECHANISM": "PLAIN", "ORIGIN": "none", "DIR": "/other",
		"STRATEGY": "record", "SOURCE": "inferred",
	}
	changed := map[string]string{} // field -> flag
	base := Defaults()
	for _, o := range options {
		if o == configOption {
			continue
		}
		c := Defaults()
		v, ok := sample[o.value.arg]
		if !ok {
			t.Fatalf("no sample value for %s", o.value.arg)
		}
		if o.value.arg == "BOOL" && o.value.get(&c) == "true" {
			v = "false" // an option on by default (--streaming)
		}
		if o.value.arg == "FORMAT" && o.value.get(&c) == v {
			v = "avro" // --key-format's default is text
		}
		if err := o.value.set(&c, v); err != nil {
			t.Fatalf("--%s: set(%q): %v", o.flag, v, err)
		}
		fields := diffFields(base, c)
		if len(fields) != 1 {
			t.Errorf("--%s changed fields %v, want exactly one", o.flag, fields)
			continue
		}
		if prev, dup := changed[fields[0]]; dup {
			t.Errorf("--%s and --%s both set %s", prev, o.flag, fields[0])
		}
		changed[fields[0]] = o.flag
	}
	for _, f := range allFields() {
		if _, ok := changed[f]; !ok {
			t.Errorf("Config field %s has no option", f)
		}
	}
}
