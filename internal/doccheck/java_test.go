package doccheck

import (
	"strings"
	"testing"
)

// javaConsumerSource is the Java program e2e/debezium_avro_test.go runs to
// decode walbox's records with Apicurio's converter.
const javaConsumerSource = "e2e/debezium/apicurio/WalboxAvroDecode.java"

// javaBetween returns the lines of text between the lines "// docs:begin"
// and "// docs:end", their common four-space class indentation removed.
func javaBetween(t *testing.T, text string) []string {
	t.Helper()
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch strings.TrimSpace(l) {
		case "// docs:begin":
			in = true
			continue
		case "// docs:end":
			return out
		}
		if in {
			out = append(out, strings.TrimPrefix(l, "    "))
		}
	}
	t.Fatalf("%s has no // docs:begin ... // docs:end region", javaConsumerSource)
	return nil
}

// javaBlocks returns the fenced ```java blocks of a markdown page.
func javaBlocks(text string) [][]string {
	var out [][]string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```java" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		out = append(out, lines[start:min(i, len(lines))])
	}
	return out
}

// TestJavaConsumerSnippetIsTheTestedCode: the Java consumer that
// docs/schema-registry.md shows is, line for line, the code of the program
// the e2e test decodes walbox's records with.
func TestJavaConsumerSnippetIsTheTestedCode(t *testing.T) {
	want := javaBetween(t, read(t, javaConsumerSource))
	blocks := javaBlocks(read(t, "docs/schema-registry.md"))
	if len(blocks) != 1 {
		t.Fatalf("docs/schema-registry.md has %d java blocks, want the one Java consumer", len(blocks))
	}
	got := blocks[0]
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Fatalf("docs/schema-registry.md's Java consumer differs from %s at its line %d:\n  docs: %q\n  code: %q", javaConsumerSource, i+1, g, w)
			}
		}
	}
}
