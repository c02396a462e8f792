package inbox_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/walbox/walbox/inbox"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestConcurrentMigrate: every instance of a consumer group calling
// Migrate at start, as the example does, starts several at once on a new
// database (a deployment's replicas): all of them succeed. CREATE TABLE
// IF NOT EXISTS racing itself used to fail all but one with a duplicate key
// on pg_type.
func TestConcurrentMigrate(t *testing.T) {
	srv := shared.Server(t)
	ib, err := inbox.New(inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		dsn := srv.DSN(pgtest.NewDatabase(t, srv))
		const n = 4
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			conn := connect(t, dsn)
			wg.Go(func() { errs[i] = ib.Migrate(ctx(t), conn) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %d concurrent Migrate calls on a new database: %v", round, n, err)
		}
	}
}
