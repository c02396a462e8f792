package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/walbox/walbox/decoder"
)

// FuzzRoute feeds arbitrary headers JSON, payload and aggregate type through
// a classic table. Route must never panic; under PolicyFail it returns either
// a valid record or an ErrInvalidRow, under PolicyDeadLetter always a record,
// identical to the PolicyFail one when the row was valid. Row headers are
// checked against json.Decoder as the reference for what the document says.
func FuzzRoute(f *testing.F) {
	seeds := []struct {
		headers, payload, aggType string
		bytea                     bool
	}{
		{`{"correlation_id": "c-1", "trace_id": "t-9"}`, `{"total": 12.5}`, "order", false},
		{`{}`, `{}`, "order", false},
		{`{"n": 1.5e3, "t": true, "z": null, "o": {"a": [1, {"b": "}"}]}}`, `[]`, "a.b-c_d", false},
		{`{"e\"k": "line\nbreak \u00e9", "dup": 1, "dup": 2}`, `"x"`, "order", false},
		{`[1, 2]`, `{}`, "order", false},
		{`"str"`, `{}`, "order", false},
		{`{"a": 1`, `{}`, "order", false},
		{` {"k" : "v" } `, `\x7b7d`, "order", true},
		{`{"k": "v"}`, `\x7`, "order", true},
		{`{"k": "v"}`, `\001\\x`, "order", true},
		{`{"k": "v"}`, `{}`, "", false},
		{`{"k": "v"}`, `{}`, "bad/topic", false},
		{`{"k": "v"}`, `{}`, "..", false},
		{"{\"k\": \"\xff\"}", `{}`, "order", false},
	}
	for _, s := range seeds {
		f.Add([]byte(s.headers), []byte(s.payload), s.aggType, s.bytea)
	}
	f.Fuzz(func(t *testing.T, headers, payload []byte, aggType string, bytea bool) {
		rel := classicRel()
		if bytea {
			rel.Columns[rel.ColumnIndex("payload")].TypeOID = decoder.ByteaOID
		}
		ins := classicRow(rel, map[string]decoder.Value{
			"headers":        {Kind: decoder.KindText, Data: headers},
			"payload":        {Kind: decoder.KindText, Data: payload},
			"aggregate_type": txt(aggType),
		})

		failing := mustNew(t, Config{})
		got, err := failing.Route(ins)
		if err != nil {
			if !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("error does not wrap ErrInvalidRow: %v", err)
			}
		} else {
			checkValidRecord(t, got, headers, payload, bytea)
		}

		dl := mustNew(t, Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dlq"})
		dead, dlErr := dl.Route(ins)
		if dlErr != nil {
			t.Fatalf("dead-letter policy returned an error: %v", dlErr)
		}
		if dead.Record == nil {
			t.Fatal("dead-letter policy returned no record")
		}
		if err != nil {
			if !dead.DeadLetter || dead.Record.Topic != "dlq" || dead.Reason == "" {
				t.Fatalf("invalid row not dead-lettered: DeadLetter=%v topic=%q reason=%q",
					dead.DeadLetter, dead.Record.Topic, dead.Reason)
			}
		} else if !reflect.DeepEqual(summarize(t, dead), summarize(t, got)) {
			t.Fatalf("policies disagree on a valid row:\n fail: %v\n dead: %v", summarize(t, got), summarize(t, dead))
		}

		// The same headers read through ->> in the template must not panic either.
		js := mustNew(t, Config{TopicTemplate: "t.{headers->>correlation_id}",
			InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dlq"})
		if r, err := js.Route(ins); err != nil || r.Record == nil {
			t.Fatalf("->> template: record %v, err %v", r.Record, err)
		}
	})
}

func checkValidRecord(t *testing.T, got Routed, headers, payload []byte, bytea bool) {
	t.Helper()
	rec := got.Record
	if rec == nil {
		t.Fatal("nil record without an error")
	}
	if got.DeadLetter || got.Reason != "" {
		t.Fatalf("valid row marked dead letter (%q)", got.Reason)
	}
	if why := topicProblem(rec.Topic); why != "" {
		t.Fatalf("routed to invalid topic %q: %s", rec.Topic, why)
	}
	if string(rec.Key) != "o-1" {
		t.Fatalf("key = %q", rec.Key)
	}
	wantValue := payload
	if bytea {
		var err error
		if wantValue, err = decoder.DecodeBytea(payload); err != nil {
			t.Fatalf("row with undecodable bytea payload %q routed", payload)
		}
	}
	if !bytes.Equal(rec.Value, wantValue) {
		t.Fatalf("value = %q, want %q", rec.Value, wantValue)
	}
	want, ok := referenceHeaders(headers)
	if !ok {
		t.Fatalf("headers %q are not a JSON object but the row routed", headers)
	}
	if !utf8.Valid(headers) {
		return // the reference replaces invalid UTF-8; the router passes bytes through
	}
	want = append([]string{"event_id=42", "event_type=OrderCreated"}, want...)
	var gotHeaders []string
	for _, h := range rec.Headers {
		gotHeaders = append(gotHeaders, h.Key+"="+string(h.Value))
	}
	if !reflect.DeepEqual(gotHeaders, want) {
		t.Fatalf("headers of %q:\n got %q\nwant %q", headers, gotHeaders, want)
	}
}

// referenceHeaders is the slow, obviously right reading of a headers column:
// json.Decoder tokens, strings decoded, other values compacted.
func referenceHeaders(doc []byte) ([]string, bool) {
	if !json.Valid(doc) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return nil, false
	}
	var out []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		var v string
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, false
			}
		} else {
			var b bytes.Buffer
			if err := json.Compact(&b, raw); err != nil {
				return nil, false
			}
			v = b.String()
		}
		out = append(out, k.(string)+"="+v)
	}
	return out, true
}
