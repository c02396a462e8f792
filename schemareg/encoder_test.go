package schemareg

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const idAvro = `{"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}`

// TestCacheNoRequestPerEvent: steady state asks the registry nothing, and a
// registry that is down changes nothing while the cache covers the traffic.
func TestCacheNoRequestPerEvent(t *testing.T) {
	f := newFake(t)
	topics := []string{"a", "b", "c"}
	for _, tp := range topics {
		f.register(t, tp+"-value", sr.TypeAvro, idAvro)
	}
	e, reg := newTestEncoder(t, f, Config{Format: FormatAvro})
	before := f.requests.Load()
	for i := range 3000 {
		if _, err := e.Encode(context.Background(), nil, topics[i%3], []byte(`{"id": 1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.requests.Load() - before; n != 3 {
		t.Errorf("%d registry requests for 3000 records on 3 subjects, want 3", n)
	}
	if got := testutil.ToFloat64(e.misses); got != 3 {
		t.Errorf("walbox_schema_cache_misses_total = %v, want 3", got)
	}
	if got := testutil.ToFloat64(e.requests.WithLabelValues("ok")); got != 3 {
		t.Errorf("ok requests = %v, want 3", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
	f.Close()
	for _, tp := range topics {
		if _, err := e.Encode(context.Background(), nil, tp, []byte(`{"id": 2}`)); err != nil {
			t.Errorf("topic %s with the registry down: %v", tp, err)
		}
	}
	if _, err := e.Encode(context.Background(), nil, "d", []byte(`{"id": 2}`)); !errors.Is(err, ErrRegistryUnavailable) {
		t.Errorf("an uncached subject with the registry down: %v, want ErrRegistryUnavailable", err)
	}
}

// TestCacheBounded: the cache holds at most CacheSize subjects; an evicted
// one is read again.
func TestCacheBounded(t *testing.T) {
	f := newFake(t)
	for _, tp := range []string{"a", "b", "c"} {
		f.register(t, tp+"-value", sr.TypeAvro, idAvro)
	}
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro, CacheSize: 2})
	for range 2 {
		for _, tp := range []string{"a", "b", "c"} {
			if _, err := e.Encode(context.Background(), nil, tp, []byte(`{"id": 1}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.cache.Len() != 2 {
		t.Errorf("cache holds %d subjects, want 2", e.cache.Len())
	}
	if got := testutil.ToFloat64(e.misses); got != 6 {
		t.Errorf("%v misses cycling 3 subjects through a cache of 2, want 6", got)
	}
}

// failing answers the first n requests with status and a Confluent error body.
func failing(n int64, status, code int) (srfake.Interceptor, *atomic.Int64) {
	var seen atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) bool {
		if seen.Add(1) > n {
			return false
		}
		w.WriteHeader(status)
		w.Write([]byte(`{"error_code": ` + itoa(code) + `, "message": "injected"}`))
		return true
	}, &seen
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRegistryFaults(t *testing.T) {
	tests := []struct {
		name      string
		fail      int64 // requests failed
		status    int
		code      int
		class     error // nil: succeeds after the failures
		want      []string
		wantTries int64
		result    string // the metric label counted for the failures
	}{
		{name: "503 then ok", fail: 2, status: 503, code: 50001, wantTries: 3, result: "transient"},
		{name: "429 then ok", fail: 1, status: 429, code: 429, wantTries: 2, result: "transient"},
		{name: "503 past the budget", fail: 1 << 30, status: 503, code: 50001, class: ErrRegistryUnavailable,
			want: []string{"HTTP 503", `subject "orders-value" at its latest version`, "is failing; check its logs"}, result: "transient"},
		{name: "401", fail: 1, status: 401, code: 40101, class: ErrRegistryRefused, wantTries: 1,
			want: []string{"HTTP 401", "refused walbox's credentials"}, result: "refused"},
		{name: "403", fail: 1, status: 403, code: 40301, class: ErrRegistryRefused, wantTries: 1,
			want: []string{"HTTP 403", "may read the subject"}, result: "refused"},
		{name: "unknown subject", fail: 1, status: 404, code: 40401, class: ErrRegistryRefused, wantTries: 1,
			want: []string{`register the schema under subject "orders-value"`}, result: "refused"},
		{name: "unknown subject, as Apicurio says it", fail: 1, status: 404, code: 40402, class: ErrRegistryRefused, wantTries: 1,
			want: []string{`register the schema under subject "orders-value"`, "or was deleted"}, result: "refused"},
		{name: "wrong URL path", fail: 1, status: 404, code: 404, class: ErrRegistryRefused, wantTries: 1,
			want: []string{"check the registry URL", "/apis/ccompat/v7"}, result: "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.register(t, "orders-value", sr.TypeAvro, idAvro)
			ic, seen := failing(tt.fail, tt.status, tt.code)
			f.Intercept(ic)
			e, _ := newTestEncoder(t, f, Config{Format: FormatAvro})
			_, err := e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
			if tt.class == nil {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantRegistryError(t, err, tt.class, tt.want...)
			}
			if tt.wantTries != 0 && seen.Load() != tt.wantTries {
				t.Errorf("%d requests, want %d", seen.Load(), tt.wantTries)
			}
			if got := testutil.ToFloat64(e.requests.WithLabelValues(tt.result)); got != 1 && tt.class != nil {
				t.Errorf("%s requests = %v, want 1 (counted once per Encode)", tt.result, got)
			}
		})
	}
}

func TestRegistryUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	cl := newTestClient(t, url, func(c *ClientConfig) { c.RetryBudget = 500 * time.Millisecond })
	var waits []time.Duration
	cl.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	e, err := NewEncoder(Config{Format: FormatAvro}, cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
	wantRegistryError(t, err, ErrRegistryUnavailable, "is running and reachable", url)
	// 100 + 200 ms fit the 500 ms budget, 400 more would not.
	if len(waits) != 2 || waits[0] != 100*time.Millisecond || waits[1] != 200*time.Millisecond {
		t.Errorf("backoff waits %v, want [100ms 200ms]", waits)
	}
}

func TestRegistryStopping(t *testing.T) {
	f := newFake(t)
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool { w.WriteHeader(503); return true })
	cl := newTestClient(t, f.URL())
	ctx, cancel := context.WithCancel(context.Background())
	cl.sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	e, _ := NewEncoder(Config{Format: FormatAvro}, cl, nil)
	_, err := e.Encode(ctx, nil, "orders", []byte(`{"id": 1}`))
	if !errors.Is(err, ErrRegistryUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want ErrRegistryUnavailable and context.Canceled", err)
	}
}

func TestWrongSchemaType(t *testing.T) {
	f := newFake(t)
	f.register(t, "orders-value", sr.TypeJSON, `{"type": "object"}`)
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro})
	_, err := e.Encode(context.Background(), nil, "orders", []byte(`{}`))
	wantRegistryError(t, err, ErrRegistryRefused, "holds a JSON schema but the format is avro", `subject "orders-value" version 1 (id 1)`)
}

func TestPinnedVersionAndID(t *testing.T) {
	f := newFake(t)
	v1 := f.register(t, "orders-value", sr.TypeAvro, idAvro)
	v2 := f.register(t, "orders-value", sr.TypeAvro,
		`{"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "int", "default": 0}]}`)
	tests := []struct {
		name   string
		cfg    Config
		wantID int
	}{
		{name: "latest", cfg: Config{Format: FormatAvro}, wantID: v2},
		{name: "version 1", cfg: Config{Format: FormatAvro, Version: 1}, wantID: v1},
		{name: "id", cfg: Config{Format: FormatAvro, ID: v1}, wantID: v1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newTestEncoder(t, f, tt.cfg)
			out, err := e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
			if err != nil {
				t.Fatal(err)
			}
			if id, _, _ := ParseHeader(out); int(id) != tt.wantID {
				t.Errorf("id %d, want %d", id, tt.wantID)
			}
		})
	}
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro, Version: 9})
	_, err := e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
	wantRegistryError(t, err, ErrRegistryRefused, `subject "orders-value" version 9`, "pin an existing version")
}

func TestSubject(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{}, "orders-value"},
		{Config{Strategy: TopicName, Key: true}, "orders-key"},
		{Config{Strategy: RecordName, RecordName: "shop.Order"}, "shop.Order"},
		{Config{Strategy: TopicRecordName, RecordName: "shop.Order"}, "orders-shop.Order"},
	}
	for _, tt := range tests {
		if got := tt.cfg.Subject("orders"); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.cfg, got, tt.want)
		}
	}
	for class, want := range map[string]SubjectStrategy{
		"io.confluent.kafka.serializers.subject.TopicNameStrategy":       TopicName,
		"io.confluent.kafka.serializers.subject.RecordNameStrategy":      RecordName,
		"io.confluent.kafka.serializers.subject.TopicRecordNameStrategy": TopicRecordName,
	} {
		if got, ok := StrategyForClass(class); !ok || got != want {
			t.Errorf("StrategyForClass(%s) = %q, %v", class, got, ok)
		}
	}
	if _, ok := StrategyForClass("com.example.Mine"); ok {
		t.Error("an unknown strategy class was accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" valid
	}{
		{name: "avro", cfg: Config{Format: FormatAvro}},
		{name: "no format", cfg: Config{}, want: "give one of avro, protobuf, json-schema, or pre-encoded"},
		{name: "pre-encoded", cfg: Config{Format: FormatPreEncoded}},
		{name: "pre-encoded with a version", cfg: Config{Format: FormatPreEncoded, Version: 2}, want: "selects no schema"},
		{name: "bad strategy", cfg: Config{Format: FormatAvro, Strategy: "x"}, want: "give one of topic, record, topic-record"},
		{name: "record without name", cfg: Config{Format: FormatAvro, Strategy: RecordName}, want: "needs the record's fully-qualified name"},
		{name: "version and id", cfg: Config{Format: FormatAvro, Version: 1, ID: 2}, want: "pin one of them"},
		{name: "message for avro", cfg: Config{Format: FormatAvro, ProtobufMessage: "a.B"}, want: "Protobuf message name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrInvalidConfig with %q", err, tt.want)
			}
		})
	}
}

func TestClientConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  ClientConfig
		want string
	}{
		{name: "plain", cfg: ClientConfig{URLs: []string{"http://r:8081"}}},
		{name: "basic", cfg: ClientConfig{URLs: []string{"https://r"}, BasicAuthUser: "u", BasicAuthPasswordFile: "/p"}},
		{name: "no URL", cfg: ClientConfig{}, want: "no registry URL"},
		{name: "not http", cfg: ClientConfig{URLs: []string{"r:8081"}}, want: "is not an http:// or https:// URL"},
		{name: "credentials in the URL, redacted", cfg: ClientConfig{URLs: []string{"http://u:s3cret@r"}}, want: "http://u:xxxxx@r"},
		{name: "user without password", cfg: ClientConfig{URLs: []string{"http://r"}, BasicAuthUser: "u"}, want: "without a password"},
		{name: "password without user", cfg: ClientConfig{URLs: []string{"http://r"}, BasicAuthPassword: "p"}, want: "without a user"},
		{name: "basic and bearer", cfg: ClientConfig{URLs: []string{"http://r"}, BasicAuthUser: "u", BasicAuthPassword: "p", BearerToken: "t"}, want: "give one of them"},
		{name: "cert without key", cfg: ClientConfig{URLs: []string{"http://r"}, TLSCertFile: "/c"}, want: "give both or neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrInvalidConfig with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

// TestAuth: basic auth from a file and a bearer token reach the registry;
// a wrong secret is a refusal naming the credentials, never the secret.
func TestAuth(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("walbox:s3cret"))
	tests := []struct {
		name   string
		expect string
		cfg    func(*ClientConfig)
		ok     bool
	}{
		{name: "basic from a file", expect: basic, ok: true,
			cfg: func(c *ClientConfig) { c.BasicAuthUser, c.BasicAuthPasswordFile = "walbox", pwFile }},
		{name: "basic, wrong password", expect: basic,
			cfg: func(c *ClientConfig) { c.BasicAuthUser, c.BasicAuthPassword = "walbox", "wrong" }},
		{name: "bearer", expect: "Bearer tok", ok: true, cfg: func(c *ClientConfig) { c.BearerToken = "tok" }},
		{name: "none", expect: "Bearer tok", cfg: func(*ClientConfig) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := srfake.New(srfake.WithAuth(tt.expect))
			defer f.Close()
			if _, _, err := f.RegisterSchema("orders-value", sr.Schema{Schema: idAvro}); err != nil {
				t.Fatal(err)
			}
			e, err := NewEncoder(Config{Format: FormatAvro}, newTestClient(t, f.URL(), tt.cfg), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantRegistryError(t, err, ErrRegistryRefused, "HTTP 40", "credentials")
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong") {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
	if _, err := NewClient(ClientConfig{URLs: []string{"http://r"}, BasicAuthUser: "u", BasicAuthPasswordFile: filepath.Join(dir, "none")}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a missing password file: %v, want ErrInvalidConfig", err)
	}
}

// TestErrorsClassifyAsNetwork: a transient fault is a net.Error (a caller
// reconnecting on network errors retries it), a refusal never is, even when
// its cause is a *url.Error (a certificate that does not verify).
func TestErrorsClassifyAsNetwork(t *testing.T) {
	urlErr := &url.Error{Op: "Get", URL: "https://r", Err: errors.New("x509: certificate signed by unknown authority")}
	var netErr net.Error
	tests := []struct {
		name    string
		err     error
		wantNet bool
		wantIs  error
	}{
		{name: "503", err: &RegistryError{Transient: true, Status: 503, Err: &sr.ResponseError{StatusCode: 503}}, wantNet: true, wantIs: ErrRegistryUnavailable},
		{name: "refused connection", err: &RegistryError{Transient: true, Err: urlErr}, wantNet: true, wantIs: ErrRegistryUnavailable},
		{name: "bad certificate", err: &RegistryError{Err: urlErr}, wantIs: ErrRegistryRefused},
		{name: "401", err: &RegistryError{Status: 401, Err: &sr.ResponseError{StatusCode: 401}}, wantIs: ErrRegistryRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrapped := fmt.Errorf("router: row: %w", tt.err)
			if got := errors.As(wrapped, &netErr); got != tt.wantNet {
				t.Errorf("errors.As(net.Error) = %v, want %v", got, tt.wantNet)
			}
			if !errors.Is(wrapped, tt.wantIs) {
				t.Errorf("not %v", tt.wantIs)
			}
		})
	}
	var resp *sr.ResponseError
	if !errors.As(tests[3].err, &resp) || resp.StatusCode != 401 {
		t.Error("a refusal does not unwrap to its *sr.ResponseError")
	}
}

func TestSchemaDoesNotCompile(t *testing.T) {
	f := newFake(t)
	f.register(t, "orders-value", sr.TypeAvro, `{"type": "record", "name": "E", "fields": [{"name": "id", "type": "nosuchtype"}]}`)
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro})
	_, err := e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
	wantRegistryError(t, err, ErrRegistryRefused, "the schema does not compile; fix it in the registry", `subject "orders-value" version 1`)
}

// TestKeyEncoder: the key's text is a JSON string for the "<topic>-key"
// subject's schema; protobuf keys are refused.
func TestKeyEncoder(t *testing.T) {
	f := newFake(t)
	avroID := f.register(t, "orders-key", sr.TypeAvro, `"string"`)
	jsonID := f.register(t, "lines-key", sr.TypeJSON, `{"type": "string", "maxLength": 5}`)
	f.register(t, "counts-key", sr.TypeAvro, `"long"`)
	cl := newTestClient(t, f.URL())
	avroKeys, err := NewKeyEncoder(Config{Format: FormatAvro}, cl, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	out, err := avroKeys.EncodeValue(nil, "orders", []byte(`o-"1"`))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if id, body, _ := ParseHeader(out); int(id) != avroID || avro.Unmarshal(avro.MustParse(`"string"`), body, &s) != nil || s != `o-"1"` {
		t.Errorf("key %q decodes to %q, want the text", out, s)
	}
	_, err = avroKeys.EncodeValue(nil, "counts", []byte("7"))
	wantPayloadError(t, err, "$", "expected an integer (long)", `the string "7"`)

	jsonKeys, err := NewKeyEncoder(Config{Format: FormatJSONSchema}, cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err = jsonKeys.EncodeValue(nil, "lines", []byte("ab"))
	if id, body, _ := ParseHeader(out); err != nil || int(id) != jsonID || string(body) != `"ab"` {
		t.Errorf("key %q, %v; want the JSON string", out, err)
	}
	_, err = jsonKeys.EncodeValue(nil, "lines", []byte("abcdefg"))
	wantPayloadError(t, err, "$", "maxLength")

	if _, err := NewKeyEncoder(Config{Format: FormatProtobuf}, cl, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("protobuf keys: %v, want ErrInvalidConfig", err)
	}
	// A value and a key encoder share a metrics registry.
	reg := prometheus.NewRegistry()
	if _, err := NewEncoder(Config{Format: FormatAvro}, cl, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewKeyEncoder(Config{Format: FormatAvro}, cl, reg); err != nil {
		t.Fatal(err)
	}
}

// TestPreEncoded: a payload already in wire format passes through as it is
// once its schema id is known to exist (asked once per id); a payload
// without the header, or naming an id the registry lacks, is invalid.
func TestPreEncoded(t *testing.T) {
	f := newFake(t)
	id := f.register(t, "orders-value", sr.TypeAvro, idAvro)
	e, _ := newTestEncoder(t, f, Config{Format: FormatPreEncoded})
	rec := append(AppendHeader(nil, uint32(id), nil), 0x0e) // {"id": 7}
	before := f.requests.Load()
	for range 3 {
		out, err := e.Encode(context.Background(), nil, "orders", rec)
		if err != nil || !bytes.Equal(out, rec) {
			t.Fatalf("pre-encoded %v: %q, %v; want it as it is", rec, out, err)
		}
	}
	if n := f.requests.Load() - before; n != 1 {
		t.Errorf("%d registry requests for one id, want 1", n)
	}
	_, err := e.Encode(context.Background(), nil, "orders", []byte(`{"id": 7}`))
	wantPayloadError(t, err, "$", "must be in Confluent wire format", "magic byte")
	_, err = e.Encode(context.Background(), nil, "orders", append(AppendHeader(nil, 999, nil), 0))
	wantPayloadError(t, err, "$", "schema id 999 does not exist in the registry")
	if _, err := NewKeyEncoder(Config{Format: FormatPreEncoded}, newTestClient(t, f.URL()), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("pre-encoded keys: %v, want ErrInvalidConfig", err)
	}
}

// TestUnavailable: a transient failure is reported until a request
// succeeds; a refusal is not an unavailable registry.
func TestUnavailable(t *testing.T) {
	f := newFake(t)
	f.register(t, "orders-value", sr.TypeAvro, idAvro)
	var status atomic.Int32
	f.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if s := status.Load(); s != 0 {
			w.WriteHeader(int(s))
			return true
		}
		return false
	})
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro, CacheSize: 1})
	if _, ok := e.Unavailable(); ok {
		t.Error("unavailable before any request")
	}
	status.Store(503)
	e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
	if s, ok := e.Unavailable(); !ok || s != "orders-value" {
		t.Errorf("after a 503: %q, %v; want orders-value", s, ok)
	}
	status.Store(0)
	if _, err := e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Unavailable(); ok {
		t.Error("still unavailable after a success")
	}
	status.Store(401)
	e.Encode(context.Background(), nil, "other", []byte(`{"id": 1}`))
	if _, ok := e.Unavailable(); ok {
		t.Error("a refusal reported as unavailable")
	}
}
