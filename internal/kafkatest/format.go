package kafkatest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
)

// A broker's storage is a copy of a template that Kafka's StorageTool
// formatted once per process for the same properties (ports and directories
// aside): the tool is a JVM run of about a second and a CPU second. With a
// static quorum (controller.quorum.voters) the formatted storage names no
// endpoint, so one format serves every port. Each copy gets a cluster id and
// a directory id of its own in meta.properties, as a format would give it.

type formatted struct {
	once    sync.Once
	dataDir string
	err     error
}

var formats struct {
	mu    sync.Mutex
	byKey map[string]*formatted
}

// portFree are the properties that differ between brokers of the same
// options: not part of a template's key.
var portFree = []string{"listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs"}

// copyFormatted makes b.dataDir a copy of the formatted template for props.
func (b *Broker) copyFormatted(ctx context.Context, props map[string]string) error {
	keyProps := maps.Clone(props)
	for _, k := range portFree {
		delete(keyProps, k)
	}
	key := b.java + "\x00" + b.cp.String() + "\x00" + strings.Join(b.opts.JVMArgs, " ") + "\x00" + renderProperties(keyProps)

	formats.mu.Lock()
	if formats.byKey == nil {
		formats.byKey = map[string]*formatted{}
	}
	f := formats.byKey[key]
	if f == nil {
		f = &formatted{}
		formats.byKey[key] = f
	}
	formats.mu.Unlock()

	f.once.Do(func() {
		root, err := makeRoot()
		if err != nil {
			f.err = err
			return
		}
		dataDir := filepath.Join(root, "data")
		tprops := maps.Clone(props)
		tprops["log.dirs"] = dataDir
		propsPath := filepath.Join(root, "server.properties")
		if err := os.WriteFile(propsPath, []byte(renderProperties(tprops)), 0o644); err != nil {
			_ = os.RemoveAll(root)
			f.err = fmt.Errorf("kafkatest: %w", err)
			return
		}
		if err := b.runFormat(ctx, propsPath, root); err != nil {
			_ = os.RemoveAll(root)
			f.err = err
			return
		}
		removeAtExit(root)
		f.dataDir = dataDir
	})
	if f.err != nil {
		formats.mu.Lock()
		if formats.byKey[key] == f {
			delete(formats.byKey, key) // the next broker formats again (this ctx may have ended)
		}
		formats.mu.Unlock()
		return f.err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", f.dataDir, b.dataDir).CombinedOutput(); err != nil {
		return fmt.Errorf("kafkatest: copy the formatted storage %s: %w\n%s", f.dataDir, err, out)
	}
	return newIdentity(filepath.Join(b.dataDir, "meta.properties"))
}

var metaID = regexp.MustCompile(`(?m)^(cluster\.id|directory\.id)=.*$`)

// newIdentity gives the storage whose meta.properties is at path a new
// cluster id and directory id.
func newIdentity(path string) error {
	meta, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	if n := len(metaID.FindAll(meta, -1)); n != 2 {
		return fmt.Errorf("kafkatest: %s has %d of cluster.id and directory.id, want both once:\n%s", path, n, meta)
	}
	var idErr error
	meta = metaID.ReplaceAllFunc(meta, func(line []byte) []byte {
		name, _, _ := strings.Cut(string(line), "=")
		id, err := newClusterID() // a Kafka Uuid, like both ids
		if err != nil {
			idErr = err
		}
		return []byte(name + "=" + id)
	})
	if idErr != nil {
		return fmt.Errorf("kafkatest: new id: %w", idErr)
	}
	if err := os.WriteFile(path, meta, 0o644); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	return nil
}

// removeAtExit removes dir once this process has ended, however it ends: a
// shell waits for the end of a pipe that only this process holds open.
func removeAtExit(dir string) {
	cmd := exec.Command("sh", "-c", `read _; rm -rf "$1"`, "sh", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not ended by a Ctrl-C meant for us
	w, err := cmd.StdinPipe()
	if err != nil {
		return
	}
	if err := cmd.Start(); err != nil {
		return
	}
	go func() {
		_ = cmd.Wait() // never returns while we run: the shell waits for us
		_ = w.Close()  // w is kept open, and reachable, until then
	}()
}
