package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// commitsOffsets matches a franz-go call that commits consumer offsets.
var commitsOffsets = regexp.MustCompile(`\.(CommitRecords|CommitOffsets|CommitOffsetsSync|CommitUncommittedOffsets|CommitMarkedOffsets)\(`)

// exampleMarker ends the comment of inbox/example_test.go's Example after
// which the consumer snippet begins; it runs to the end of the function.
const exampleMarker = "(internal/doccheck compares them)."

// consumerExample returns the code of the inbox package's Example that the
// documentation shows, one tab of indentation removed.
func consumerExample(t *testing.T) []string {
	t.Helper()
	lines := strings.Split(read(t, "inbox/example_test.go"), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, exampleMarker) })
	if i < 0 {
		t.Fatalf("inbox/example_test.go has no line with %q before the documented code", exampleMarker)
	}
	var out []string
	for _, l := range lines[i+1:] {
		if l == "}" {
			return out
		}
		out = append(out, strings.TrimPrefix(l, "\t"))
	}
	t.Fatal("inbox/example_test.go: the Example does not end")
	return nil
}

// codeBlocks returns the fenced ```go blocks of a markdown page, with the
// line number of each opening fence.
func codeBlocks(text string) map[int][]string {
	out := map[int][]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		out[start] = lines[start:min(i, len(lines))]
	}
	return out
}

// docCodeBlocks returns the code blocks of a Go file's comments (lines
// "//\t..."), keyed by the line of their first line.
func docCodeBlocks(text string) map[int][]string {
	out := map[int][]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "//\t") {
			continue
		}
		start := i + 1
		var block []string
		for ; i < len(lines) && strings.HasPrefix(lines[i], "//\t"); i++ {
			block = append(block, strings.TrimPrefix(lines[i], "//\t"))
		}
		out[start] = block
	}
	return out
}

// TestOffsetCommitSnippetsAreTheExample: every code snippet of README.md,
// docs/*.md and the packages' doc.go that commits Kafka offsets is the
// code of inbox's Example, which is compiled (and sets
// kgo.DisableAutoCommit: with franz-go's default autocommit, the offsets
// of a batch whose transaction failed can be committed, so "restart
// without committing" would not hold). docs/delivery.md and inbox/doc.go
// showed a shorter snippet without it.
func TestOffsetCommitSnippetsAreTheExample(t *testing.T) {
	want := consumerExample(t)
	if !slices.ContainsFunc(want, func(l string) bool { return strings.Contains(l, "kgo.DisableAutoCommit()") }) {
		t.Error("inbox's Example does not disable franz-go's autocommit")
	}
	check := func(where string, block []string) {
		t.Helper()
		if !slices.ContainsFunc(block, commitsOffsets.MatchString) {
			return
		}
		if !slices.Equal(block, want) {
			t.Errorf("%s: a snippet that commits offsets differs from inbox/example_test.go's Example; make it that code:\n%s\n--- want ---\n%s",
				where, strings.Join(block, "\n"), strings.Join(want, "\n"))
		}
	}
	found := map[string]bool{}
	for _, page := range pages(t) {
		for line, block := range codeBlocks(read(t, page)) {
			check(page+":"+itoa(line), block)
			found[page] = found[page] || slices.ContainsFunc(block, commitsOffsets.MatchString)
		}
	}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "doc.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		for line, block := range docCodeBlocks(string(b)) {
			check(rel+":"+itoa(line), block)
			found[rel] = found[rel] || slices.ContainsFunc(block, commitsOffsets.MatchString)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, where := range []string{"docs/delivery.md", "inbox/doc.go"} {
		if !found[where] {
			t.Errorf("%s has no consumer snippet that commits offsets any more; this test expects the inbox's", where)
		}
	}
}
