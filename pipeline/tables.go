package pipeline

import "github.com/walbox/walbox/decoder"

// Only the configured outbox tables are routed. A table added to the
// publication later (FOR ALL TABLES, or by hand) would otherwise turn its
// rows into events, or dead letters. Its inserts are counted
// (walbox_foreign_changes_total, no per-table label) and logged once per
// relation, and the slot is confirmed past them like past any other change
// walbox does not route.

// maxRouteCache bounds the relations whose routing decision a session
// caches, and maxForeignLogged the relations logged as foreign. A
// publication with more tables than that costs a map lookup (or a missing
// log line, said once) per relation, not unbounded memory.
const (
	maxRouteCache    = 1024
	maxForeignLogged = 1024
)

// foreignLog remembers which foreign relations were logged; it outlives
// sessions, so a reconnect does not log them again.
type foreignLog struct {
	logged map[uint32]struct{}
	full   bool
}

// routes reports whether inserts of rel are outbox events. Relations of a
// session are decoded once, so the answer is cached by pointer; the last
// one is checked first, since an outbox stream is nearly always one table.
func (l *loop) routes(rel *decoder.Relation) bool {
	if l.tables == nil {
		return true
	}
	if rel == l.lastRel {
		return l.lastRoutes
	}
	ok, cached := l.routeCache[rel]
	if !cached {
		_, ok = l.tables[rel.QualifiedName()]
		if l.routeCache == nil || len(l.routeCache) >= maxRouteCache {
			l.routeCache = make(map[*decoder.Relation]bool)
		}
		l.routeCache[rel] = ok
	}
	l.lastRel, l.lastRoutes = rel, ok
	return ok
}

// foreignChange counts an insert into a table that is not the outbox and
// logs the first one of each relation.
func (l *loop) foreignChange(ins *decoder.Insert) {
	l.metrics.foreignChanges.Inc()
	f := l.foreign
	id := ins.Relation.ID
	if _, ok := f.logged[id]; ok || f.full {
		return
	}
	if len(f.logged) >= maxForeignLogged {
		f.full = true
		l.log.Warn("inserts into more tables that are not the outbox; no longer logging each, see walbox_foreign_changes_total",
			"tables_logged", len(f.logged))
		return
	}
	if f.logged == nil {
		f.logged = make(map[uint32]struct{})
	}
	f.logged[id] = struct{}{}
	l.log.Warn("inserts into a table that is not the outbox are not routed; remove the table from the publication, or add it to the outbox tables if its rows are events",
		"table", ins.Relation.QualifiedName(), "relation_id", id, "lsn", ins.LSN.String(),
		"publication", l.cfg.Publication, "outbox_tables", l.cfg.Tables)
}
