package pgtest_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/pgtest"
)

// installTimeout bounds InstallNPMVersions in tests; a first install of all
// versions takes about 15 s.
const installTimeout = 5 * time.Minute

// installVersions installs the npm-packaged versions when npm is there. A
// machine without npm (or without the network) runs the versions it has,
// unless WALBOX_REQUIRE_INTEGRATION=1, which makes that a failure.
func installVersions(t *testing.T) {
	t.Helper()
	required := os.Getenv(pgtest.RequireEnv) == "1"
	if _, err := exec.LookPath("npm"); err != nil {
		if required {
			t.Fatalf("npm is needed to install the PostgreSQL versions under test (%s=1): %v", pgtest.RequireEnv, err)
		}
		t.Logf("no npm, testing only the versions already installed: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	start := time.Now()
	installed, err := pgtest.InstallNPMVersions(ctx)
	if err != nil {
		if required {
			t.Fatalf("InstallNPMVersions: %v", err)
		}
		t.Logf("InstallNPMVersions failed, testing only the versions already installed: %v", err)
	}
	t.Logf("InstallNPMVersions: %d installed into %s in %s", len(installed), pgtest.NPMDir(), time.Since(start).Round(10*time.Millisecond))
}

// TestEveryVersionDecodes starts a server of each installed major version
// and decodes an insert with pgoutput through a logical slot: the server
// runs, its version is the one listed, and pgoutput.so is found in its
// pkglibdir (the slot would fail to be created otherwise).
func TestEveryVersionDecodes(t *testing.T) {
	installVersions(t)
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		t.Parallel()
		start := time.Now()
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		t.Logf("%s server started in %s", v, time.Since(start).Round(10*time.Millisecond))
		if srv.MajorVersion() != v.Major {
			t.Errorf("MajorVersion() = %d, want %d", srv.MajorVersion(), v.Major)
		}
		conn := connect(t, srv.DSN("postgres"))
		if got, want := show(t, conn, "server_version_num"), itoa(v.Major); len(got) != 6 || got[:2] != want {
			t.Errorf("server_version_num = %s, want %sxxxx", got, want)
		}
		mustExec(t, conn, "CREATE TABLE t (id int PRIMARY KEY, v text)")
		mustExec(t, conn, "CREATE PUBLICATION p FOR TABLE t")
		mustExec(t, conn, "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
		mustExec(t, conn, "INSERT INTO t VALUES (1, 'one')")

		// 'B'egin, 'R'elation, 'I'nsert, 'C'ommit; count the inserts.
		var rows, inserts int
		if err := conn.QueryRow(context.Background(), `
			SELECT count(*), count(*) FILTER (WHERE get_byte(data, 0) = ascii('I'))
			FROM pg_logical_slot_get_binary_changes('s', NULL, NULL,
				'proto_version', '1', 'publication_names', 'p')`).Scan(&rows, &inserts); err != nil {
			t.Fatalf("pg_logical_slot_get_binary_changes: %v", err)
		}
		if rows == 0 || inserts != 1 {
			t.Fatalf("pgoutput returned %d messages with %d inserts, want > 0 and 1", rows, inserts)
		}
	})
}

// TestForEachVersionRunsTheDefault checks that ForEachVersion, unfiltered,
// includes the version StartServer uses by default.
func TestForEachVersionRunsTheDefault(t *testing.T) {
	t.Setenv(pgtest.VersionsEnv, "")
	// It used to skip on a missing PostgreSQL even with
	// WALBOX_REQUIRE_INTEGRATION=1, so CI could pass without running it.
	dir := pgtest.RequireBinDir(t)
	var ran bool
	t.Run("versions", func(t *testing.T) {
		pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
			if v.BinDir == dir {
				ran = true
			}
		})
	})
	if !ran {
		t.Errorf("ForEachVersion did not run the default BinDir %s", dir)
	}
}
