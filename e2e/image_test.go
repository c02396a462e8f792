package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
)

// imageUID is the non-root user the Dockerfile runs as.
const imageUID = 65532

// podmanArgs are the global options podman needs on the project's machines:
// the vfs storage that deploy/image/build.sh's buildah writes to, runc
// (crun fails on their cgroup layout) and cgroupfs (no systemd).
var podmanArgs = []string{"--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs"}

// imageTools returns podman's path, or skips the test when podman or
// buildah is missing, unless WALBOX_REQUIRE_INTEGRATION=1, which makes that
// a failure: CI must not pass by not running the image.
func imageTools(t *testing.T) string {
	t.Helper()
	var missing []string
	for _, tool := range []string{"podman", "buildah", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("the image test needs %s (Debian: apt-get install podman buildah runc)", strings.Join(missing, ", "))
		if os.Getenv(pgtest.RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skipf("%s; set %s=1 to fail instead", msg, pgtest.RequireEnv)
	}
	podman, _ := exec.LookPath("podman")
	return podman
}

// imageStore is a container storage of the test's own, in a temporary
// directory: build.sh's buildah keeps the image there and podman its
// containers and its state database, not in the host's
// /var/lib/containers. A host whose default storage some other use of
// podman set up first (podman then refuses the vfs driver: "database
// storage graph driver "" does not match our storage graph driver "vfs":
// database configuration mismatch"), or that holds a leftover image or
// container of the same name, cannot fail or mislead the test.
type imageStore struct {
	env  []string // CONTAINERS_STORAGE_CONF, for buildah and podman
	args []string // podman's global options: the store's paths and podmanArgs
}

func newImageStore(t *testing.T) imageStore {
	t.Helper()
	dir := t.TempDir()
	root, run, tmp := filepath.Join(dir, "root"), filepath.Join(dir, "run"), filepath.Join(dir, "tmp")
	conf := filepath.Join(dir, "storage.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", root, run)), 0o600); err != nil {
		t.Fatal(err)
	}
	return imageStore{
		env:  []string{"CONTAINERS_STORAGE_CONF=" + conf, "STORAGE_DRIVER=vfs"},
		args: append([]string{"--root", root, "--runroot", run, "--tmpdir", tmp}, podmanArgs...),
	}
}

// podman runs podman on the store with args, and returns its stdout.
func (st imageStore) podman(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "podman", append(append([]string(nil), st.args...), args...)...)
	cmd.Env = append(os.Environ(), st.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// podmanRun is the start of every `podman run` of the test: the options the
// project's machines need (host network, rlimits runc may set) and a root
// filesystem that is read-only with no tmpfs added on /tmp or /run, so
// anything walbox wrote would fail.
var podmanRun = []string{"run", "--network", "host",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
	"--read-only", "--read-only-tmpfs=false"}

// TestImage builds the image with deploy/image/build.sh, the way a user and
// the release do (one Dockerfile, FROM scratch, binaries from the machine's
// Go toolchain), and runs walbox from it against a Postgres that asks for a
// password and a real Kafka broker:
//   - `walbox --version` and `slotctl --version` from the image print the
//     version the build set;
//   - the configuration comes from the environment (DSN, brokers, metrics
//     address) and from a YAML file mounted read-only (slot, topic, status
//     interval); the Postgres password from a mounted passfile owned by the
//     image's user, as a Kubernetes Secret volume provides it;
//   - the root filesystem is read-only, with no tmpfs;
//   - walbox runs as uid 65532, as PID 1 of the container;
//   - /healthz and /readyz answer on the metrics port, and /metrics has
//     walbox_build_info with the build's version;
//   - every event is delivered;
//   - SIGTERM to PID 1 exits 0, and the slot's confirmed_flush_lsn then
//     covers the last transaction.
func TestImage(t *testing.T) {
	fulltest.Require(t, "builds the container image and runs walbox from it")
	imageTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	n := biSeq.Add(1)
	tag := fmt.Sprintf("walbox-e2e-%d-%d", os.Getpid(), n)
	image := "localhost/walbox:" + tag
	const wantVersion = "v0.0.0-e2e"
	build := exec.CommandContext(ctx, "deploy/image/build.sh")
	build.Dir = ".."
	store := newImageStore(t)
	build.Env = append(append(os.Environ(), store.env...), "IMAGE="+image, "VERSION="+wantVersion)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/image/build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := store.podman(context.Background(), t, "rmi", "--force", image); err != nil {
			t.Logf("remove the image: %v", err)
		}
	})
	if out, err := store.podman(ctx, t, "image", "inspect", "--format", "{{.Size}}", image); err == nil {
		t.Logf("image %s: %s bytes", image, strings.TrimSpace(out))
	}

	for _, bin := range []string{"walbox", "slotctl"} {
		out, err := store.podman(ctx, t, append(append([]string(nil), podmanRun...), "--rm", "--entrypoint", "/usr/local/bin/"+bin, image, "--version")...)
		if err != nil {
			t.Fatal(err)
		}
		if want := bin + " " + wantVersion + " (revision "; !strings.HasPrefix(out, want) {
			t.Errorf("%s --version in the image printed %q, want it to start with %q", bin, out, want)
		}
	}

	// Postgres with passwords, the outbox and walbox's role from migrations/.
	pg := pgtest.Start(t, pgtest.WithPasswordAuth())
	db := pgtest.NewDatabase(t, pg)
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, f := range []string{"001_outbox.sql", "002_publication.sql", "003_walbox_role.sql", "004_emit_message_privilege.sql", "005_heartbeat_function.sql"} {
		sql, err := migrations.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	const password = "image-test-secret"
	if _, err := conn.Exec(ctx, `ALTER ROLE walbox PASSWORD '`+password+`'`); err != nil {
		t.Fatal(err)
	}
	e := &biEnv{db: db, conn: conn, ctx: ctx, slot: fmt.Sprintf("image_%d", n), prefix: fmt.Sprintf("image.%d", n), dir: t.TempDir()}
	e.ensureSlot(t)
	broker := kafkatest.Start(t)
	e.brokers = broker.Addrs()

	// The mounted files: the YAML configuration (readable by anyone, as a
	// ConfigMap is) and the passfile (0400, owned by the image's user, as
	// a Secret volume with fsGroup or defaultMode gives it).
	u, err := url.Parse(pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	pgpass := filepath.Join(e.dir, "pgpass")
	if err := os.WriteFile(pgpass, []byte(fmt.Sprintf("%s:%s:%s:walbox:%s\n", host, port, db, password)), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(pgpass, imageUID, imageUID); err != nil {
		t.Fatal(err)
	}
	yamlFile := filepath.Join(e.dir, "walbox.yaml")
	yaml := fmt.Sprintf("slot: %s\ntopic: %q\nstatus_interval: 10s\nlog_level: info\n", e.slot, e.prefix+".{aggregate_type}")
	if err := os.WriteFile(yamlFile, []byte(yaml), 0o444); err != nil {
		t.Fatal(err)
	}
	u.User = url.User("walbox")
	q := u.Query()
	q.Set("passfile", "/run/secrets/walbox/pgpass")
	u.RawQuery = q.Encode()
	metricsAddr := freeAddr(t)

	col := startCollectorPattern(ctx, t, e.brokers, "^"+regexp.QuoteMeta(e.prefix)+`\..+`)
	name := tag
	runArgs := append(append([]string(nil), podmanRun...), "-d", "--name", name,
		"-v", pgpass+":/run/secrets/walbox/pgpass:ro",
		"-v", yamlFile+":/etc/walbox/walbox.yaml:ro",
		"-e", "WALBOX_CONFIG=/etc/walbox/walbox.yaml",
		"-e", "WALBOX_PG_DSN="+u.String(),
		"-e", "WALBOX_KAFKA_BROKERS="+strings.Join(e.brokers, ","),
		"-e", "WALBOX_METRICS_ADDR="+metricsAddr,
		image) // CMD: run
	if _, err := store.podman(ctx, t, runArgs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := store.podman(context.Background(), t, "logs", name)
			t.Logf("container logs:\n%s", tail(logs, 8000))
		}
		_, _ = store.podman(context.Background(), t, "rm", "--force", "--time", "0", name)
	})
	running := func() bool {
		out, err := store.podman(ctx, t, "inspect", "--format", "{{.State.Running}}", name)
		return err == nil && strings.TrimSpace(out) == "true"
	}

	// uid 65532, PID 1 of its namespace: read from the host's /proc.
	out, err := store.podman(ctx, t, "inspect", "--format", "{{.State.Pid}}", name)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + strings.TrimSpace(out) + "/status")
	if err != nil {
		t.Fatalf("the container's process: %v", err)
	}
	checked := 0
	for _, l := range strings.Split(string(status), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:"):
			checked++
			for _, id := range f[1:] {
				if id != strconv.Itoa(imageUID) {
					t.Errorf("walbox runs with %s, want %d everywhere (non-root)", l, imageUID)
					break
				}
			}
		case len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] != "1":
			t.Errorf("walbox is not PID 1 of the container: %s", l)
		}
	}
	if checked != 2 {
		t.Errorf("no Uid and Gid lines in the process status:\n%s", status)
	}

	get := func(path string) (int, string) {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+metricsAddr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntil(ctx, t, 90*time.Second, "/readyz to answer 200 (streaming)", func() bool {
		if !running() {
			t.Fatal("the container stopped before it was ready")
		}
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `walbox_build_info{goversion="go`) || !strings.Contains(body, `version="`+wantVersion+`"`) {
		t.Errorf("/metrics: %d, want walbox_build_info with version %q:\n%s", code, wantVersion, grepLines(body, "walbox_build_info"))
	}

	const events = 20
	ids := make([]string, 0, events)
	for i := 0; i < events-1; i++ {
		ids = append(ids, e.insert(t, validRow(fmt.Sprintf("ord-%d", i))))
	}
	// The last transaction: the WAL position before its commit is below
	// its commit's end LSN, which is what the final confirm must reach.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id, before string
	if err := tx.QueryRow(ctx, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'ord-last', 'OrderPlaced', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	waitUntil(ctx, t, 90*time.Second, fmt.Sprintf("the %d events to be delivered from the container", events), func() bool {
		for _, id := range ids {
			if delivered(col, e.prefix+".order", id) == 0 {
				return false
			}
		}
		return true
	})
	confirmedBefore := e.confirmedLSN(t)

	// SIGTERM to PID 1, as `podman stop`, `docker stop` and the kubelet do.
	if _, err := store.podman(ctx, t, "kill", "--signal", "TERM", name); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	out, err = store.podman(wctx, t, "wait", name)
	if err != nil {
		t.Fatalf("walbox did not exit after SIGTERM: %v", err)
	}
	if code := strings.TrimSpace(out); code != "0" {
		t.Errorf("walbox exited %s after SIGTERM, want 0", code)
	}
	lastTxn, err := pglogrepl.ParseLSN(before)
	if err != nil {
		t.Fatal(err)
	}
	if c := e.confirmedLSN(t); c <= lastTxn {
		t.Errorf("after SIGTERM the slot confirmed %s, not past the last transaction (WAL at %s before its commit; %s confirmed before the signal)", c, lastTxn, confirmedBefore)
	} else {
		t.Logf("confirmed_flush_lsn %s before SIGTERM, %s after (last transaction's commit after %s)", confirmedBefore, c, lastTxn)
	}
}

// freeAddr returns a loopback address with a port free at the time of the
// call: the container shares the host's network, where 9187 may be taken.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
