package router

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
)

// fakeEncoder prefixes valid payloads; "bad" payloads are invalid, "down"
// ones a registry fault.
type fakeEncoder struct{ topics []string }

type fakeInvalid struct{ msg string }

func (e *fakeInvalid) Error() string        { return e.msg }
func (e *fakeInvalid) InvalidPayload() bool { return true }

var errFakeDown = errors.New("registry unavailable")

func (f *fakeEncoder) EncodeValue(dst []byte, topic string, payload []byte) ([]byte, error) {
	f.topics = append(f.topics, topic)
	switch {
	case bytes.Contains(payload, []byte("bad")):
		return dst, &fakeInvalid{"at $.total: expected a number"}
	case bytes.Contains(payload, []byte("down")):
		return dst, errFakeDown
	}
	return append(append(dst, 0, 0, 0, 0, 1), payload...), nil
}

// TestRouteValueEncoder: the router hands the routed topic and payload to
// the encoder and sends what it returns; an invalid payload follows the
// invalid-row policy with the encoder's reason; another encoder error stops
// routing, naming the row.
func TestRouteValueEncoder(t *testing.T) {
	const dlt = "outbox.dead-letter"
	row := func(payload string) *decoder.Insert {
		return classicRow(classicRel(), map[string]decoder.Value{"payload": txt(payload)})
	}
	t.Run("valid", func(t *testing.T) {
		enc := &fakeEncoder{}
		rt := mustRouter(t, Config{Values: enc})
		got, err := rt.Route(row(`{"total": 1}`))
		if err != nil {
			t.Fatal(err)
		}
		if want := "\x00\x00\x00\x00\x01" + `{"total": 1}`; string(got.Record.Value) != want || got.DeadLetter {
			t.Errorf("value %q, want %q", got.Record.Value, want)
		}
		if len(enc.topics) != 1 || enc.topics[0] != "outbox.event.order" {
			t.Errorf("encoder saw topics %q, want the routed one", enc.topics)
		}
	})
	t.Run("invalid, fail", func(t *testing.T) {
		rt := mustRouter(t, Config{Values: &fakeEncoder{}})
		_, err := rt.Route(row(`{"total": "bad"}`))
		var ire *InvalidRowError
		if !errors.As(err, &ire) || !errors.Is(err, ErrInvalidRow) {
			t.Fatalf("error %v, want an *InvalidRowError", err)
		}
		for _, w := range []string{`id "42"`, "LSN 0/16B3748", `column "payload"`, "at $.total: expected a number"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	})
	t.Run("invalid, dead-letter", func(t *testing.T) {
		rt := mustRouter(t, Config{Values: &fakeEncoder{}, InvalidRows: PolicyDeadLetter, DeadLetterTopic: dlt})
		got, err := rt.Route(row(`{"total": "bad"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !got.DeadLetter || got.Record.Topic != dlt || string(got.Record.Value) != `{"total": "bad"}` {
			t.Errorf("routed %+v, want the payload as it is on %s", got.Record, dlt)
		}
		if !strings.Contains(got.Reason, "at $.total: expected a number") || headerValue(got.Record, HeaderError) != got.Reason {
			t.Errorf("reason %q, header %q", got.Reason, headerValue(got.Record, HeaderError))
		}
	})
	t.Run("registry fault", func(t *testing.T) {
		rt := mustRouter(t, Config{Values: &fakeEncoder{}, InvalidRows: PolicyDeadLetter, DeadLetterTopic: dlt})
		_, err := rt.Route(row(`{"total": "down"}`))
		if !errors.Is(err, errFakeDown) || errors.Is(err, ErrInvalidRow) {
			t.Fatalf("error %v, want the encoder's error, not an invalid row", err)
		}
		for _, w := range []string{`row id "42"`, "LSN 0/16B3748", `topic "outbox.event.order"`} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	})
	t.Run("not called for an otherwise invalid row", func(t *testing.T) {
		enc := &fakeEncoder{}
		rt := mustRouter(t, Config{Values: enc})
		if _, err := rt.Route(classicRow(classicRel(), map[string]decoder.Value{"aggregate_id": null})); !errors.Is(err, ErrInvalidRow) {
			t.Fatalf("error %v, want ErrInvalidRow", err)
		}
		if len(enc.topics) != 0 {
			t.Errorf("encoder called for a row already invalid")
		}
	})
}

func mustRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func headerValue(rec *kgo.Record, key string) string {
	v, _ := header(rec, key)
	return v
}

// TestRouteKeyEncoder: the key encoder sees the aggregate id and its output
// is the record key; an invalid key is an invalid row naming the aggregate
// id column, and a dead-lettered row keeps the raw key and value.
func TestRouteKeyEncoder(t *testing.T) {
	const dlt = "outbox.dead-letter"
	row := func(aggID string) *decoder.Insert {
		return classicRow(classicRel(), map[string]decoder.Value{"aggregate_id": txt(aggID)})
	}
	rt := mustRouter(t, Config{Keys: &fakeEncoder{}, Values: &fakeEncoder{}})
	got, err := rt.Route(row("o-1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Record.Key) != "\x00\x00\x00\x00\x01o-1" || !bytes.HasPrefix(got.Record.Value, []byte{0, 0, 0, 0, 1}) {
		t.Errorf("key %q value %q, want both encoded", got.Record.Key, got.Record.Value)
	}
	_, err = rt.Route(row("bad-1"))
	if !errors.Is(err, ErrInvalidRow) || !strings.Contains(err.Error(), `column "aggregate_id"`) {
		t.Errorf("error %v, want an invalid row naming aggregate_id", err)
	}
	dl := mustRouter(t, Config{Keys: &fakeEncoder{}, Values: &fakeEncoder{}, InvalidRows: PolicyDeadLetter, DeadLetterTopic: dlt})
	got, err = dl.Route(classicRow(classicRel(), map[string]decoder.Value{"payload": txt(`{"x": "bad"}`)}))
	if err != nil {
		t.Fatal(err)
	}
	if !got.DeadLetter || string(got.Record.Key) != "o-1" || string(got.Record.Value) != `{"x": "bad"}` {
		t.Errorf("dead letter key %q value %q, want both as written", got.Record.Key, got.Record.Value)
	}
}
