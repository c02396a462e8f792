package slotctl_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/slotctl"
)

// insertRows commits n outbox rows into table as the superuser.
func (e env) insertRows(t *testing.T, table string, n int) {
	t.Helper()
	if _, err := e.conn.Exec(context.Background(), `INSERT INTO `+table+` (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'OrderCreated', '{}' FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
}

func TestExistingRows(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	e.exec(t, "CREATE TABLE public.outbox2 (LIKE public.outbox INCLUDING ALL)", "CREATE TABLE public.empty (LIKE public.outbox INCLUDING ALL)")
	e.insertRows(t, "public.outbox", 3)
	e.insertRows(t, "public.outbox2", slotctl.ExistingRowsLimit+5)

	got, err := slotctl.ExistingRows(ctxT(t), e.conn, slotctl.Config{Table: "public.outbox,public.empty,public.outbox2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []slotctl.TableRows{
		{Table: slotctl.TableName{Schema: "public", Name: "outbox"}, Rows: 3},
		{Table: slotctl.TableName{Schema: "public", Name: "outbox2"}, Rows: slotctl.ExistingRowsLimit, More: true},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ExistingRows() = %+v, want %+v", got, want)
	}
	if w := got[1].UnsentWarning("walbox"); !strings.Contains(w, "more than 1000 rows") {
		t.Errorf("warning for a large table does not say \"more than 1000 rows\": %s", w)
	}
	if got, err := slotctl.ExistingRows(ctxT(t), e.conn, slotctl.Config{Table: "public.empty"}); err != nil || len(got) != 0 {
		t.Errorf("ExistingRows(empty table) = %+v, %v; want none", got, err)
	}
}

// TestSetupWarnsOfExistingRows: `walbox run` creating its slot (first
// start, or --create-slot) over an outbox that already holds rows warns
// that they will not be sent, and how to send them.
//
// Regression (issue 15): the quickstart inserted its example event before
// the slot existed; walbox logged only "created the replication slot" and
// the event was never sent.
func TestSetupWarnsOfExistingRows(t *testing.T) {
	for _, createMissing := range []bool{false, true} {
		e := newEnv(t, nil, "001_outbox.sql")
		e.insertRows(t, "public.outbox", 2)
		log := &logbuf.Buffer{}
		opts := setupOptions(log)
		cfg := slotctl.Config{Slot: e.db, CreateOnFirstStart: true, CreateMissing: createMissing}
		if _, _, err := slotctl.Setup(ctxT(t), e.srv.DSN(e.db), cfg, opts); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"level=WARN", "public.outbox already holds 2 rows", "will not be sent",
			"slotctl drop --slot " + e.db, "--create-slot --snapshot all", "INSERT INTO public.outbox SELECT * FROM moved"} {
			if !strings.Contains(log.String(), s) {
				t.Errorf("CreateMissing=%v: log lacks %q:\n%s", createMissing, s, log)
			}
		}
		// Once the slot exists, rows in the table are the slot's to stream
		// or already streamed: no warning.
		log2 := &logbuf.Buffer{}
		opts.Logger = slog.New(slog.NewTextHandler(log2, nil))
		if _, _, err := slotctl.Setup(ctxT(t), e.srv.DSN(e.db), cfg, opts); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log2.String(), "already holds") {
			t.Errorf("warned again on a start that found the slot:\n%s", log2)
		}
	}

	// An empty outbox: nothing to warn about.
	e := newEnv(t, nil, "001_outbox.sql")
	log := &logbuf.Buffer{}
	if _, _, err := slotctl.Setup(ctxT(t), e.srv.DSN(e.db), slotctl.Config{Slot: e.db, CreateOnFirstStart: true}, setupOptions(log)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "already holds") {
		t.Errorf("warned of rows in an empty outbox:\n%s", log)
	}
}

func TestUnsentWarningQuotesOnlyWhatNeedsIt(t *testing.T) {
	w := slotctl.TableRows{Table: slotctl.TableName{Schema: "app", Name: "Outbox"}, Rows: 1}.UnsentWarning("walbox")
	for _, s := range []string{"app.Outbox already holds 1 row,", `DELETE FROM app."Outbox" RETURNING *`} {
		if !strings.Contains(w, s) {
			t.Errorf("warning lacks %q: %s", s, w)
		}
	}
}
