package eventrouter

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
)

// expandCorpus holds payloads for the differential test: every JSON shape
// JsonSchemaData treats specially.
var expandCorpus = []string{
	`{"a":1}`, `{}`, `[]`, `[1, 2]`, `[{"a": 1}]`, `"str"`, ` {"lead": "space"}`, `{"a":1} trailing`,
	`{"n": 1, "l": 3000000000, "big": 12345678901234567890123, "d": 1.5, "e": 1e3, "f": -0.0, "g": 1E-7}`,
	`{"d": 12345678.9, "e": 1.0E7, "f": 0.001, "g": 0.0001, "h": 9999999.0, "i": 123456789012345678}`,
	`{"s": "q\"b\\s/\b\f\n\r\t\u0001\u001f\u007f é 日本 😀"}`,
	`{"nested": {"deeper": {"x": [1, 2, 3], "y": null}}, "none": null}`,
	`{"arr": [{"a": 1}, {"a": 2}, {"a": 3}]}`,
	`{"arr": [{"a": 1}, {"b": "x"}]}`,
	`{"arr": [{"a": null}, {"a": 1}]}`,
	`{"arr": [null, {"a": 1}, null]}`,
	`{"arr": [1, 3000000000]}`, `{"arr": [1.5, 2]}`, `{"arr": [1, "a"]}`, `{"arr": [null, null]}`,
	`{"arr": [[1, 2], [3]]}`, `{"arr": [[1], ["a"]]}`, `{"arr": [[], [1]]}`, `{"arr": [true, false, null]}`,
	`{"dup": 1, "dup": "two"}`, `{"a": {"b": [{"c": {"d": 1}}]}}`,
	`{"empty": [], "obj": {}, "zero": 0, "neg": -12}`,
	`{"a": [12345678901234567890, 1]}`,
	`{bad json}`, `{"a": 01}`, `{"a": 1,}`, `[1, 2`, `{"a": "\ud83d\ude00"}`,
	// Non-finite numbers, lone surrogates and Jackson's read limits.
	`{"x": 1e999, "y": -1e999, "z": 1.5}`, `{"x": [1e999, 2.5]}`,
	`{"x": "a\ud800b", "y": "\udc01", "z": "\ude00\ud83d", "\ud800": 1}`,
	`{"x": ` + strings.Repeat("1", 1000) + `}`, `{"x": ` + strings.Repeat("1", 1001) + `}`,
	`{"x": 1.` + strings.Repeat("5", 999) + `}`, `{"x": 1.` + strings.Repeat("5", 1000) + `}`,
	`{"x": 1.5e` + strings.Repeat("0", 997) + `1}`, `{"x": 1.5e` + strings.Repeat("0", 998) + `1}`,
	`{"` + strings.Repeat("n", 50_000) + `": 1}`, `{"` + strings.Repeat("n", 50_001) + `": 1}`,
	`{"x": ` + strings.Repeat("[", 998) + "{}" + strings.Repeat("]", 998) + `}`,
	`{"x": ` + strings.Repeat("[", 999) + "{}" + strings.Repeat("]", 999) + `}`,
	`{"x": ` + strings.Repeat("[", 999) + "1" + strings.Repeat("]", 999) + `}`,
}

// randomJSON returns a random JSON document biased towards the shapes above.
func randomJSON(r *rand.Rand, depth int) string {
	if depth > 3 {
		return randomScalar(r)
	}
	switch r.IntN(4) {
	case 0:
		n := r.IntN(4)
		var parts []string
		for range n {
			parts = append(parts, strconv.Quote(string(rune('a'+r.IntN(4))))+": "+randomJSON(r, depth+1))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case 1:
		n := r.IntN(4)
		var parts []string
		elem := func() string { return randomJSON(r, depth+1) }
		if r.IntN(2) == 0 { // homogeneous, as real payloads are
			kind := r.IntN(3)
			elem = func() string {
				switch kind {
				case 0:
					return strconv.Itoa(r.IntN(100))
				case 1:
					return `{"k": ` + randomScalar(r) + `}`
				}
				return randomScalar(r)
			}
		}
		for range n {
			parts = append(parts, elem())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return randomScalar(r)
}

func randomScalar(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return "null"
	case 1:
		return "true"
	case 2:
		return strconv.Itoa(r.IntN(2000) - 1000)
	case 3:
		return strconv.FormatInt(r.Int64(), 10)
	case 4:
		return strconv.FormatFloat(r.NormFloat64()*float64(r.IntN(1e9)), 'g', -1, 64)
	case 5:
		return strconv.FormatFloat(r.Float64()/1e5, 'e', -1, 64)
	case 6:
		return `"` + string(rune(0x20+r.IntN(0x300))) + `\n"`
	}
	return `"s"`
}

// TestExpandMatchesDebezium runs Debezium's own JsonSchemaData and Kafka's
// JsonConverter (testdata/ExpandCheck.java, on the classpath of
// internal/debeziumtest) on a corpus of payloads plus random ones, and
// requires walbox's expansion to give the same outcome and the same bytes
// through JsonConverter with and without schemas and StringConverter.
func TestExpandMatchesDebezium(t *testing.T) {
	fulltest.Require(t, "Debezium's JsonConverter on a JVM")
	if testing.Short() {
		t.Skip("runs a JVM")
	}
	java, jars := debeziumClasspath(t)
	javac := filepath.Join(filepath.Dir(java), "javac")
	dir := t.TempDir()
	cp := strings.Join(jars, string(os.PathListSeparator))
	if out, err := exec.Command(javac, "-d", dir, "-cp", cp, filepath.Join("testdata", "ExpandCheck.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	payloads := append([]string(nil), expandCorpus...)
	r := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		payloads = append(payloads, randomJSON(r, 0))
	}
	var in bytes.Buffer
	for _, p := range payloads {
		in.WriteString(base64.StdEncoding.EncodeToString([]byte(p)) + "\n")
	}
	for _, behavior := range []string{"ignore", "optional_bytes"} {
		t.Run(behavior, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, java, "-cp", cp+string(os.PathListSeparator)+dir, "ExpandCheck", behavior)
			cmd.Stdin = bytes.NewReader(in.Bytes())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("java: %v", err)
			}
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(lines) != len(payloads) {
				t.Fatalf("java answered %d lines for %d payloads", len(lines), len(payloads))
			}
			jsonb := &schema{typ: kString, optional: true, name: nameJSON, version: 1}
			for i, p := range payloads {
				s, v, half := expandJSON("payload", p, jsonb, behavior == "optional_bytes")
				outcome := "ok"
				switch {
				case half:
					outcome = "half"
				case s == jsonb:
					outcome = "clean"
				}
				got := outcome + "\t" + goConvert(ConverterConfig{Kind: JSONConverter, SchemasEnable: true}, s, v) +
					"\t" + goConvert(ConverterConfig{Kind: JSONConverter}, s, v) +
					"\t" + goConvert(ConverterConfig{Kind: StringConverter}, s, v)
				if got != lines[i] {
					t.Errorf("payload %q:\n%s", p, explain(lines[i], got))
				}
			}
		})
	}
}

func goConvert(c ConverterConfig, s *schema, v any) string {
	b, err := convert(c, s, v)
	if err != nil {
		return "ERR"
	}
	if b == nil {
		return "NULL"
	}
	return base64.StdEncoding.EncodeToString(b)
}

func explain(java, golang string) string {
	dec := func(line string) []string {
		f := strings.Split(line, "\t")
		for i := 1; i < len(f); i++ {
			if b, err := base64.StdEncoding.DecodeString(f[i]); err == nil && f[i] != "ERR" && f[i] != "NULL" {
				f[i] = string(b)
			}
		}
		return f
	}
	j, g := dec(java), dec(golang)
	var b strings.Builder
	for i := range j {
		if i < len(g) && j[i] == g[i] {
			continue
		}
		gi := "<missing>"
		if i < len(g) {
			gi = g[i]
		}
		fmt.Fprintf(&b, "  field %d:\n    Debezium %s\n    walbox   %s\n", i, j[i], gi)
	}
	return b.String()
}

// debeziumClasspath finds java and resolves internal/debeziumtest's
// classpath, skipping (or failing under WALBOX_REQUIRE_INTEGRATION=1)
// where that cannot be done.
func debeziumClasspath(t *testing.T) (string, []string) {
	t.Helper()
	java, err := kafkatest.FindJava(kafkatest.Options{})
	if err != nil {
		debeziumtest.SkipUnavailable(t, err)
		t.Fatal(err)
	}
	pom, err := kafkatest.FindProjectFile("", debeziumtest.PomEnv, filepath.Join("e2e", "debezium", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	jars, _, err := kafkatest.ResolveClasspath(ctx, kafkatest.Options{}, pom, "debezium")
	if err != nil {
		debeziumtest.SkipUnavailable(t, err)
		t.Fatal(err)
	}
	return java, jars
}
