package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/walbox/walbox/router"
)

// TestRunCloudEvents: walbox run --cloudevents binary adds the CloudEvents
// headers to each record, and structured sends the JSON event format, with
// the commit time as ce_time.
func TestRunCloudEvents(t *testing.T) {
	parallel(t)
	e := newTableEnv(t)
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.CloudEvents, cfg.CloudEventsSource = "binary", "/orders-service"
	cfg.Topic = "ce.{aggregate_type}"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, cfg)
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', 'o-1', 'OrderPlaced', '{"n": 1}')`, tid(1))
	rec := consumeNew(t, e.brokers, `^ce\.order$`, 1)[0]
	for k, want := range map[string]string{router.HeaderCESpecVersion: "1.0", router.HeaderCEID: tid(1), router.HeaderCESource: "/orders-service",
		router.HeaderCEType: "OrderPlaced", router.HeaderContentType: "application/json"} {
		if got := header(rec, k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	// ce_time is the commit time, which is also the record timestamp
	// (Kafka keeps milliseconds).
	ts, err := time.Parse(time.RFC3339Nano, header(rec, router.HeaderCETime))
	if d := ts.Sub(rec.Timestamp); err != nil || d < 0 || d >= time.Millisecond || ts.Location() != time.UTC {
		t.Errorf("ce_time %q (%v), record timestamp %v", header(rec, router.HeaderCETime), err, rec.Timestamp)
	}
	if string(rec.Value) != `{"n": 1}` {
		t.Errorf("binary mode changed the value: %s", rec.Value)
	}
	in.stop(t)

	cfg.CloudEvents = "structured"
	in = startInstance(t, cfg)
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'invoice', 'i-1', 'InvoiceSent', '{"n": 2}')`, tid(2))
	rec = consumeNew(t, e.brokers, `^ce\.invoice$`, 1)[0]
	var ev struct {
		SpecVersion, ID, Source, Type, Time, DataContentType string
		Data                                                 map[string]any
	}
	if err := json.Unmarshal(rec.Value, &ev); err != nil {
		t.Fatalf("structured value %s: %v", rec.Value, err)
	}
	if ev.SpecVersion != "1.0" || ev.ID != tid(2) || ev.Source != "/orders-service" || ev.Type != "InvoiceSent" || ev.Time == "" ||
		ev.DataContentType != "application/json" || ev.Data["n"] != 2.0 || header(rec, router.HeaderContentType) != router.ContentTypeCloudEventsJSON {
		t.Errorf("structured record %s (content-type %q)", rec.Value, header(rec, router.HeaderContentType))
	}
}
