package router

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
)

// TestCloudEvents: binary mode adds the ce_* headers and content-type to
// the record as it is; structured mode sends the JSON event format with the
// payload under data (a JSON payload as it is, other text as a string, an
// encoded one base64 under data_base64); a row without an event id or event
// type is an invalid row naming the column; dead letters are not wrapped.
func TestCloudEvents(t *testing.T) {
	wantAttrs := map[string]string{
		HeaderCESpecVersion: "1.0", HeaderCEID: "42", HeaderCESource: "/walbox/public.outbox",
		HeaderCEType: "OrderCreated", HeaderCETime: "2025-01-02T03:04:05Z", HeaderContentType: "application/json",
	}
	r := mustNew(t, Config{CloudEvents: CloudEvents{Mode: CloudEventsBinary}})
	rel := classicRel()
	got, err := r.Route(classicRow(rel, nil))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range wantAttrs {
		if h, ok := header(got.Record, k); !ok || h != v {
			t.Errorf("binary: header %s = %q (%v), want %q", k, h, ok, v)
		}
	}
	if string(got.Record.Value) != `{"total": 12.5}` || string(got.Record.Key) != "o-1" {
		t.Errorf("binary: value %s key %s", got.Record.Value, got.Record.Key)
	}
	if h, _ := header(got.Record, HeaderEventID); h != "42" {
		t.Errorf("binary: walbox's own headers dropped: %v", got.Record.Headers)
	}

	r = mustNew(t, Config{CloudEvents: CloudEvents{Mode: CloudEventsStructured, Source: "/orders"}})
	for _, tc := range []struct {
		payload decoder.Value
		want    map[string]any
	}{
		{txt(`{"total": 12.5}`), map[string]any{"data": map[string]any{"total": 12.5}, "datacontenttype": "application/json"}},
		{txt(`not json`), map[string]any{"data": "not json", "datacontenttype": "text/plain; charset=utf-8"}},
	} {
		got, err := r.Route(classicRow(rel, map[string]decoder.Value{"payload": tc.payload}))
		if err != nil {
			t.Fatal(err)
		}
		var ev map[string]any
		if err := json.Unmarshal(got.Record.Value, &ev); err != nil {
			t.Fatalf("structured value %s: %v", got.Record.Value, err)
		}
		want := map[string]any{"specversion": "1.0", "id": "42", "source": "/orders", "type": "OrderCreated", "time": "2025-01-02T03:04:05Z"}
		for k, v := range tc.want {
			want[k] = v
		}
		if b1, b2 := mustJSON(ev), mustJSON(want); b1 != b2 {
			t.Errorf("structured: %s, want %s", b1, b2)
		}
		if h, _ := header(got.Record, HeaderContentType); h != ContentTypeCloudEventsJSON {
			t.Errorf("structured content-type %q", h)
		}
	}

	// An encoded value goes base64 under data_base64.
	r = mustNew(t, Config{Values: prefixEncoder{}, CloudEvents: CloudEvents{Mode: CloudEventsStructured, DataContentType: "application/avro"}})
	got, err = r.Route(classicRow(rel, nil))
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Data64 string `json:"data_base64"`
		CT     string `json:"datacontenttype"`
	}
	if err := json.Unmarshal(got.Record.Value, &ev); err != nil {
		t.Fatal(err)
	}
	if b, _ := base64.StdEncoding.DecodeString(ev.Data64); string(b) != "\x00"+`{"total": 12.5}` || ev.CT != "application/avro" {
		t.Errorf("structured with an encoder: %s", got.Record.Value)
	}

	// No event type: an invalid row naming the column; dead-lettered as it was.
	r = mustNew(t, Config{CloudEvents: CloudEvents{Mode: CloudEventsBinary}})
	_, err = r.Route(classicRow(rel, map[string]decoder.Value{"event_type": null}))
	var ire *InvalidRowError
	if !errors.As(err, &ire) || ire.Column != "event_type" || !strings.Contains(ire.Reason, "ce_type") {
		t.Fatalf("no event type: %v", err)
	}
	r = mustNew(t, Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dlq", CloudEvents: CloudEvents{Mode: CloudEventsStructured}})
	got, err = r.Route(classicRow(rel, map[string]decoder.Value{"id": null}))
	if err != nil || !got.DeadLetter || string(got.Record.Value) != `{"total": 12.5}` || !strings.Contains(got.Reason, "ce_id") {
		t.Fatalf("no id, dead letter: %+v %v", got, err)
	}
	if _, ok := header(got.Record, HeaderCESpecVersion); ok {
		t.Errorf("dead letter wrapped: %v", got.Record.Headers)
	}
	if err := (Config{CloudEvents: CloudEvents{Mode: "both"}}).Validate(); err == nil || !strings.Contains(err.Error(), "CloudEvents.Mode") {
		t.Errorf("bad mode: %v", err)
	}
}

// prefixEncoder "encodes" a value as a zero byte then the payload.
type prefixEncoder struct{}

func (prefixEncoder) EncodeValue(dst []byte, _ string, payload []byte) ([]byte, error) {
	return append(append(dst, 0), payload...), nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
