package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository root, relative to this package.
const repoRoot = "../.."

// pages returns README.md and docs/*.md, relative to repoRoot.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(repoRoot, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	if len(out) < 2 {
		t.Fatalf("no docs/*.md found under %s", repoRoot)
	}
	return out
}

func read(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	// link matches [text](target) and ![alt](target); the target ends at
	// the first space (a title may follow) or closing parenthesis.
	link    = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// issueRef is an internal issue number ("issue 8", "Issue #7").
	issueRef = regexp.MustCompile(`(?i)\bissue\s*#?\d+`)
)

// prose returns the page's lines outside fenced code blocks, with inline
// code spans blanked, keyed by line number.
func prose(text string) map[int]string {
	out := map[int]string{}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if !inFence {
			out[i+1] = inlineCode.ReplaceAllStringFunc(line, func(s string) string {
				return strings.Repeat(" ", len(s))
			})
		}
	}
	return out
}

// anchors returns the fragment ids GitHub gives the page's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		slug := slugify(m[2])
		if n := seen[slug]; n > 0 {
			out[slug+"-"+itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slugify turns a heading into its anchor as GitHub does: the rendered text
// lower-cased, everything but letters, digits, spaces, hyphens and
// underscores dropped, spaces turned into hyphens.
func slugify(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func itoa(n int) string {
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

// TestRelativeLinksResolve: every relative link of README.md and docs/*.md
// names a file or directory of the repository, and a #fragment names a
// heading of the page it points at.
func TestRelativeLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		text := read(t, page)
		lines := prose(text)
		nums := make([]int, 0, len(lines))
		for n := range lines {
			nums = append(nums, n)
		}
		slices.Sort(nums)
		for _, n := range nums {
			for _, m := range link.FindAllStringSubmatch(lines[n], -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := page
				if path != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), path)))
				}
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", page, n, target)
					continue
				}
				info, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(dest)))
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", page, n, target, dest)
					continue
				}
				if frag == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchors(read(t, dest))[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", page, n, target, dest, frag)
				}
			}
		}
	}
}

// TestNoIssueNumbers: the documentation speaks to users, who do not know the
// project's internal issue numbers.
func TestNoIssueNumbers(t *testing.T) {
	for _, page := range pages(t) {
		for i, line := range strings.Split(read(t, page), "\n") {
			if m := issueRef.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: say what is meant instead of an issue number", page, i+1, m)
			}
		}
	}
}

func TestSlugify(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Running a standby (`--standby`)", "running-a-standby---standby"},
		{"Records identical to Debezium's", "records-identical-to-debeziums"},
		{"`max_slot_wal_keep_size`", "max_slot_wal_keep_size"},
		{`How "snapshot finished" is recorded`, "how-snapshot-finished-is-recorded"},
		{"Consumers that write to their own database: package `inbox`", "consumers-that-write-to-their-own-database-package-inbox"},
		{"See [the docs](docs/x.md) now", "see-the-docs-now"},
	}
	for _, tt := range tests {
		if got := slugify(tt.heading); got != tt.want {
			t.Errorf("slugify(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}
