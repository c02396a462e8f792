package debezium

import (
	"fmt"
	"strconv"
	"strings"
)

// database builds the libpq DSN from the database.* keys.
func (t *translator) database() {
	c := t.conn
	add := func(key, param string, required bool) {
		v, ok := t.get(c, key)
		if !ok || v == "" {
			if required {
				t.fail(nil, key, "missing", "set it; walbox needs it to build --pg-dsn")
			}
			return
		}
		t.dsn = append(t.dsn, param+"="+quoteDSN(v))
		t.mapped(c, key, "--pg-dsn", param)
	}
	add("database.hostname", "host", true)
	if v, ok := t.get(c, "database.port"); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 65535 {
			t.fail(c, "database.port", "not a port number", "give a number from 1 to 65535 (Debezium's default is 5432)")
		} else {
			t.dsn = append(t.dsn, "port="+v)
			t.mapped(c, "database.port", "--pg-dsn", "port")
		}
	}
	add("database.user", "user", true)
	add("database.password", "password", false)
	add("database.dbname", "dbname", true)
	if v, ok := t.get(c, "database.sslmode"); ok {
		switch v {
		case "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
			t.dsn = append(t.dsn, "sslmode="+v)
			t.mapped(c, "database.sslmode", "--pg-dsn", "sslmode")
		default:
			t.fail(c, "database.sslmode", "not a libpq sslmode", "use disable, allow, prefer, require, verify-ca or verify-full")
		}
	}
	add("database.sslcert", "sslcert", false)
	add("database.sslkey", "sslkey", false)
	add("database.sslpassword", "sslpassword", false)
	add("database.sslrootcert", "sslrootcert", false)
	if v, ok := t.get(c, "database.sslfactory"); ok && v != "" {
		t.fail(c, "database.sslfactory", "a Java SSL socket factory has no equivalent in walbox",
			"remove it and give the certificates with database.sslrootcert, database.sslcert and database.sslkey (PEM files)")
	}
	if v, ok := t.get(c, "database.tcpKeepAlive"); ok {
		if v == "false" {
			t.warn(c, "database.tcpKeepAlive", "walbox keeps TCP keepalives on and detects a dead replication connection with --pg-receive-timeout; no effect on the records")
		} else {
			t.mapped(c, "database.tcpKeepAlive", "(default)", "walbox uses TCP keepalives")
		}
	}
	if v, ok := t.get(c, "database.initial.statements"); ok && v != "" {
		t.fail(c, "database.initial.statements", "walbox does not run statements on its connections",
			"remove it; set session settings for walbox's role with ALTER ROLE ... SET, or in --pg-dsn options")
	}
	for _, k := range []string{"database.server.name"} {
		if _, ok := t.get(c, k); ok {
			t.fail(c, k, "removed in Debezium 2.0 (replaced by topic.prefix)", "set topic.prefix instead")
		}
	}
	if len(t.dsn) > 0 {
		t.setOption("pg-dsn", strings.Join(t.dsn, " "), "database.*")
	}
}

// quoteDSN quotes a libpq key=value value when needed.
func quoteDSN(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`+"\t\n\r") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// replication maps slot, publication and plugin.
func (t *translator) replication() {
	c := t.conn
	slot := DefaultSlot
	if v, ok := t.get(c, "slot.name"); ok {
		slot = v
		t.mapped(c, "slot.name", "--slot", "")
	}
	t.setOption("slot", slot, "slot.name")
	pub := DefaultPublication
	if v, ok := t.get(c, "publication.name"); ok {
		pub = v
		t.mapped(c, "publication.name", "--publication", "")
	}
	t.setOption("publication", pub, "publication.name")
	switch v, ok := t.get(c, "plugin.name"); {
	case !ok:
		t.fail(nil, "plugin.name", "missing: Debezium's default is decoderbufs, and walbox streams only pgoutput",
			"set plugin.name=pgoutput (a decoderbufs slot cannot be taken over; see \"Migrating from Debezium\")")
	case v == "pgoutput":
		t.mapped(c, "plugin.name", "(checked)", "walbox streams pgoutput")
	default:
		t.fail(c, "plugin.name", fmt.Sprintf("walbox streams only pgoutput, not %s", v),
			"switch Debezium to plugin.name=pgoutput with a new slot first, or start walbox on a new slot (walbox run --snapshot)")
	}
	mode := AutocreateAllTables
	if v, ok := t.get(c, "publication.autocreate.mode"); ok {
		switch v {
		case AutocreateAllTables, AutocreateDisabled, AutocreateFiltered, AutocreateNoTables:
			mode = v
			t.mapped(c, "publication.autocreate.mode", "(publication check)", autocreateNote(v))
		default:
			t.fail(c, "publication.autocreate.mode", "unknown mode", "use all_tables, disabled, filtered or no_tables")
		}
	}
	t.out.AutocreateMode = mode
	if v, ok := t.get(c, "slot.drop.on.stop"); ok {
		if v == "true" {
			t.fail(c, "slot.drop.on.stop", "walbox never drops its slot: dropping it loses the position and every event not yet streamed",
				"remove it (drop a slot deliberately with `slotctl drop`)")
		} else {
			t.mapped(c, "slot.drop.on.stop", "(default)", "walbox never drops its slot")
		}
	}
	if v, ok := t.get(c, "slot.failover"); ok {
		t.setOption("failover-slot", v, "slot.failover")
		t.mapped(c, "slot.failover", "--failover-slot", "")
	}
	if v, ok := t.get(c, "status.update.interval.ms"); ok {
		if d, ok := millis(v); ok && d != "0s" {
			t.setOption("status-interval", d, "status.update.interval.ms")
			t.mapped(c, "status.update.interval.ms", "--status-interval", "")
		} else {
			t.fail(c, "status.update.interval.ms", "not a positive number of milliseconds", "give a number such as 10000")
		}
	}
	if v, ok := t.get(c, "flush.lsn.source"); ok && v == "false" {
		t.fail(c, "flush.lsn.source", "walbox always confirms the slot once Kafka has acknowledged the records before it",
			"remove it; another process confirming this slot would conflict with walbox")
	} else if ok {
		t.mapped(c, "flush.lsn.source", "(default)", "walbox confirms the slot")
	}
}

func autocreateNote(mode string) string {
	switch mode {
	case AutocreateAllTables:
		return "an existing publication may publish other tables (FOR ALL TABLES too); a missing one is created FOR TABLE the outbox tables, not FOR ALL TABLES"
	case AutocreateFiltered:
		return "a missing publication is created FOR TABLE the outbox tables; an existing one must publish exactly them (walbox prints the ALTER PUBLICATION, it does not alter it)"
	case AutocreateDisabled:
		return "the publication must exist; it may publish other tables"
	case AutocreateNoTables:
		return "the publication must exist and include the outbox tables; walbox does not create an empty one"
	}
	return ""
}

// millis turns a millisecond count into a Go duration string.
func millis(v string) (string, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > int64(1<<62)/1e6 {
		return "", false
	}
	return msDuration(n).String(), true
}
