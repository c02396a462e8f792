// Package walboxbin builds the walbox binary once per test process, for the
// suites that run it as its own process (e2e, e2e/kafkacluster).
package walboxbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
	dir  string
)

// Path returns ./cmd/walbox built with the test binaries' own Go
// configuration (so its packages come from the build cache), building it on
// the first call; a failed build fails every caller with go build's output.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "walbox-bin")
		if err != nil {
			return
		}
		path = filepath.Join(dir, "walbox")
		if out, berr := exec.Command("go", "build", "-o", path, "github.com/walbox/walbox/cmd/walbox").CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build -o %s github.com/walbox/walbox/cmd/walbox: %v\n%s", path, berr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Cleanup removes the built binary; TestMain calls it after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
