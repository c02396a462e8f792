package inbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocSnippetsCompile: the usage snippets of the package documentation
// and of docs/delivery.md are what consumers copy, so they must compile as
// they stand (inside a function with a db, a client and the helpers they
// call). They used to declare applied and never use it, which Go refuses.
func TestDocSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the snippets with the go command")
	}
	docGo, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var pkgSnippet []string
	in := false
	for _, line := range strings.Split(string(docGo), "\n") {
		switch {
		case strings.HasPrefix(line, "// Usage, a whole poll in one transaction:"):
			in = true
		case in && strings.HasPrefix(line, "//\t"):
			if code := strings.TrimPrefix(line, "//\t"); strings.TrimSpace(code) != "..." {
				pkgSnippet = append(pkgSnippet, code)
			}
		case in && len(pkgSnippet) > 0 && line != "//":
			in = false
		}
	}
	delivery, err := os.ReadFile(filepath.Join("..", "docs", "delivery.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(delivery)
	if i := strings.Index(section, "## Consumers that write to their own database"); i >= 0 {
		section = section[i:]
	} else {
		t.Fatal("docs/delivery.md: no section on the inbox")
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(section)
	if len(pkgSnippet) == 0 || m == nil {
		t.Fatalf("snippets not found (package documentation: %d lines; docs/delivery.md: %v)", len(pkgSnippet), m != nil)
	}

	// A package inside the module, so that it imports this one; a leftover
	// (a killed test) is ignored by ./... patterns.
	dir, err := os.MkdirTemp(".", "_snippet-") // "_": never matched by ./...
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := `package snippet

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
)

var (
	_ pgx.Tx
	_ inbox.Config
)

func amount(*kgo.Record) int64    { return 0 }
func id(*kgo.Record) string       { return "" }
func total(*kgo.Record) int64     { return 0 }
func customer(*kgo.Record) string { return "" }

func packageDoc(ctx context.Context, db *pgx.Conn, cl *kgo.Client) error {
` + strings.Join(pkgSnippet, "\n") + `
	return err
}

func deliveryMD(ctx context.Context, db *pgx.Conn, cl *kgo.Client) error {
` + m[1] + `
	return err
}
`
	if err := os.WriteFile(filepath.Join(dir, "snippet.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "vet", "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("the snippets do not compile: %v\n%s\n%s", err, out, src)
	}
}
