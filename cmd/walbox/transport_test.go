package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/kafkasec"
)

// Start-up logs a warning for each downgraded transport.
func TestWarnTransport(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := config.Config{PGDSN: "host=db user=walbox password=hunter2 dbname=app", KafkaSecurity: kafkasec.Config{SASLMechanism: kafkasec.MechanismPlain, SASLPassword: "hunter2"}}
	dbz := &debeziumMode{tr: &debezium.Translation{Options: []debezium.OptionValue{{Flag: "pg-dsn", Value: "host=db user=dbz dbname=app sslmode=verify-full"}}}}
	warnTransport(cfg, dbz, log)
	out := logs.String()
	if n := strings.Count(out, "INSECURE transport"); n != 3 {
		t.Errorf("%d warnings, want 3 (sslmode, verify-full dropped, SASL PLAIN):\n%s", n, out)
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("a secret is logged:\n%s", out)
	}
	logs = logbuf.Buffer{}
	warnTransport(config.Config{PGDSN: "host=db user=walbox dbname=app sslmode=verify-full"}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if logs.String() != "" {
		t.Errorf("secure settings warned:\n%s", logs.String())
	}
}
