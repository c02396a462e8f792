package schemareg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/sr"
)

// Format is a record format governed by the registry.
type Format string

// The formats.
const (
	FormatAvro       Format = "avro"
	FormatProtobuf   Format = "protobuf"
	FormatJSONSchema Format = "json-schema"
)

// Formats lists the formats, for option help and validation.
var Formats = []string{string(FormatAvro), string(FormatProtobuf), string(FormatJSONSchema)}

func (f Format) srType() sr.SchemaType {
	switch f {
	case FormatProtobuf:
		return sr.TypeProtobuf
	case FormatJSONSchema:
		return sr.TypeJSON
	}
	return sr.TypeAvro
}

// SubjectStrategy names the subject a record's schema is registered under,
// as Confluent's serializers' subject.name.strategy does.
type SubjectStrategy string

// The strategies.
const (
	// TopicName is "<topic>-value" ("<topic>-key" for keys): Confluent's
	// TopicNameStrategy, the default.
	TopicName SubjectStrategy = "topic"
	// RecordName is the record's fully-qualified name, Config.RecordName:
	// RecordNameStrategy.
	RecordName SubjectStrategy = "record"
	// TopicRecordName is "<topic>-<record name>": TopicRecordNameStrategy.
	TopicRecordName SubjectStrategy = "topic-record"
)

// Strategies lists the strategies, for option help and validation.
var Strategies = []string{string(TopicName), string(RecordName), string(TopicRecordName)}

// StrategyForClass maps the class names Confluent's serializers take in
// value.subject.name.strategy to a SubjectStrategy.
func StrategyForClass(class string) (SubjectStrategy, bool) {
	switch class {
	case "io.confluent.kafka.serializers.subject.TopicNameStrategy":
		return TopicName, true
	case "io.confluent.kafka.serializers.subject.RecordNameStrategy":
		return RecordName, true
	case "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy":
		return TopicRecordName, true
	}
	return "", false
}

// Config says how records are encoded.
type Config struct {
	// Format is the record format; required.
	Format Format
	// Strategy names the subject (TopicName when empty).
	Strategy SubjectStrategy
	// RecordName is the record's fully-qualified name (an Avro record's
	// namespace.name, a Protobuf message's package.Message, a JSON
	// Schema's title) for RecordName and TopicRecordName.
	RecordName string
	// Key makes TopicName name "<topic>-key" subjects, for record keys.
	Key bool
	// Version pins the subject's version; 0 uses the latest, read once per
	// subject and kept (a version registered later is used after a
	// restart, or after LatestTTL).
	Version int
	// LatestTTL, when positive, reads the latest version again once the
	// subject's cached schema is older than this, as Confluent's
	// latest.cache.ttl.sec does: a version registered later is used from
	// then on. The new read waits at most latestRefreshWait; if the
	// registry is unavailable then, the cached schema stays in use for
	// another LatestTTL (nothing stops); a refusal (the subject deleted,
	// 401/403) is returned as on a first read. 0 (default) reads the
	// latest version once per subject. Only with Version and ID 0.
	LatestTTL time.Duration
	// ID pins the schema id instead: the schema is read by id, whatever
	// the subject holds. Not with Version.
	ID int
	// ProtobufMessage is the fully-qualified name of the Protobuf message
	// to encode ("" is the first message of the file, as Confluent's
	// serializers take it).
	ProtobufMessage string
	// CacheSize bounds how many subjects' schemas are kept compiled
	// (DefaultCacheSize); the least recently used is dropped and read
	// again when met. In the inferred mode it bounds the inferred schemas
	// kept registered and compiled (each distinct payload shape of each
	// subject is one).
	CacheSize int
	// Source is where the schema comes from: Registered (the default when
	// empty) reads it from the registry; Inferred derives it from each
	// payload (Avro only, values only, the subject from TopicName) and
	// registers it, once per distinct schema while it stays cached.
	Source SchemaSource
	// PayloadColumn names the payload column, which names an inferred
	// schema's records (DefaultPayloadColumn when empty), as Debezium's
	// table.field.event.payload does.
	PayloadColumn string
}

// Validate checks cfg; each problem wraps ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Format == FormatPreEncoded {
		if c.Key || c.Strategy == RecordName || c.Strategy == TopicRecordName || c.RecordName != "" || c.Version != 0 || c.ID != 0 || c.ProtobufMessage != "" {
			bad("format %s passes payloads through and selects no schema: no key, subject strategy, record name, version, id or message", c.Format)
		}
	} else if !slices.Contains(Formats, string(c.Format)) {
		bad("format %q: give one of %s, or %s", c.Format, strings.Join(Formats, ", "), FormatPreEncoded)
	}
	if c.Strategy != "" && !slices.Contains(Strategies, string(c.Strategy)) {
		bad("subject name strategy %q: give one of %s", c.Strategy, strings.Join(Strategies, ", "))
	}
	if (c.Strategy == RecordName || c.Strategy == TopicRecordName) && c.RecordName == "" {
		bad("subject name strategy %q needs the record's fully-qualified name", c.Strategy)
	}
	if c.Version < 0 || c.ID < 0 {
		bad("a negative schema version or id; give a positive one, or 0 for the latest version")
	}
	if c.Version > 0 && c.ID > 0 {
		bad("both a schema version (%d) and a schema id (%d); pin one of them", c.Version, c.ID)
	}
	if c.ProtobufMessage != "" && c.Format != FormatProtobuf {
		bad("a Protobuf message name with format %q", c.Format)
	}
	if c.CacheSize < 0 {
		bad("negative cache size")
	}
	if c.Source != "" && !slices.Contains(Sources, string(c.Source)) {
		bad("schema source %q: give one of %s", c.Source, strings.Join(Sources, ", "))
	}
	if c.Source == Inferred {
		if c.Format != FormatAvro {
			bad("an inferred schema is Avro (as Debezium's expanded JSON payload with an Avro converter); format %q takes the registered schema", c.Format)
		}
		if c.Key {
			bad("keys take their registered schema; an inferred schema is for values")
		}
		if (c.Strategy != "" && c.Strategy != TopicName) || c.RecordName != "" || c.Version != 0 || c.ID != 0 {
			bad("an inferred schema is registered under <topic>-value (TopicNameStrategy) and used as registered; no subject strategy, record name, version or id")
		}
	} else if c.PayloadColumn != "" {
		bad("the payload column names inferred schemas' records; it is for the inferred schema source only")
	}
	if c.LatestTTL < 0 {
		bad("negative latest-version TTL")
	}
	if c.LatestTTL > 0 && (c.Version > 0 || c.ID > 0 || c.Format == FormatPreEncoded) {
		bad("a latest-version TTL with a pinned version or id, or pre-encoded payloads, which read no latest version")
	}
	return errors.Join(errs...)
}

// Subject returns the subject for a record on topic.
func (c Config) Subject(topic string) string {
	suffix := "-value"
	if c.Key {
		suffix = "-key"
	}
	switch c.Strategy {
	case RecordName:
		return c.RecordName
	case TopicRecordName:
		return topic + "-" + c.RecordName
	}
	return topic + suffix
}

// codec encodes a JSON document into a record body: encode appends the body
// to dst, or returns the field path and the problem.
type codec interface {
	encode(dst, doc []byte) (out []byte, path, problem string)
}

// reference is a schema another one imports: its name in the importing
// schema and its text.
type reference struct{ name, text string }

// resolved is a subject's schema, compiled, with its wire-format header.
type resolved struct {
	subject  string
	version  int
	id       int
	codec    codec
	header   []byte // magic, id, and for Protobuf the message index
	problemf func(path, problem string) *PayloadError
	// fetched is when the schema was read (Config.LatestTTL).
	fetched time.Time
}

// latestRefreshWait bounds a LatestTTL read of the latest version, so that
// a registry that is down delays the stream by at most this once per TTL.
const latestRefreshWait = 2 * time.Second

// Encoder encodes payloads for the registry. Safe for concurrent use.
type Encoder struct {
	cfg   Config
	cl    *Client
	cache *lru.Cache[string, *resolved]
	// inferredCache holds the inferred schemas registered, by subject and
	// schema text (the inferred mode).
	inferredCache *lru.Cache[string, *inferred]

	requests *prometheus.CounterVec
	misses   prometheus.Counter
	// refreshes counts LatestTTL reads of the latest version.
	refreshes prometheus.Counter
	// now is the clock for LatestTTL; replaced in tests.
	now func() time.Time

	// failing is the subject (or "id N") of the last registry request
	// when it failed transiently; nil once a request succeeds.
	failing atomic.Pointer[string]
}

// Unavailable reports whether the last registry request failed
// transiently (the registry unreachable, timing out, 5xx or 429), and for
// what subject; a later successful request clears it. Safe for concurrent
// use; walbox's /readyz reports it.
func (e *Encoder) Unavailable() (subject string, ok bool) {
	if p := e.failing.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// NewEncoder validates cfg and returns an Encoder using cl. Its metrics
// are registered on reg (none when reg is nil):
//
//	walbox_schema_registry_requests_total{role="value|key", result="ok|transient|refused"}
//	walbox_schema_cache_misses_total{role="value|key"}
//	walbox_schema_latest_refreshes_total{role="value|key"}
//
// role is "key" for a key encoder (Config.Key), so a value and a key
// encoder can share reg.
func NewEncoder(cfg Config, cl *Client, reg prometheus.Registerer) (*Encoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Strategy == "" {
		cfg.Strategy = TopicName
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	cache, err := lru.New[string, *resolved](cfg.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("%w: cache: %w", ErrInvalidConfig, err)
	}
	var inferredCache *lru.Cache[string, *inferred]
	if cfg.Source == Inferred {
		if inferredCache, err = lru.New[string, *inferred](cfg.CacheSize); err != nil {
			return nil, fmt.Errorf("%w: cache: %w", ErrInvalidConfig, err)
		}
	}
	f := promauto.With(reg)
	role := prometheus.Labels{"role": "value"}
	if cfg.Key {
		role["role"] = "key"
	}
	e := &Encoder{
		cfg:           cfg,
		cl:            cl,
		cache:         cache,
		inferredCache: inferredCache,
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name:        "walbox_schema_registry_requests_total",
			Help:        "Schema registry requests, by result: ok, transient (unreachable, timeout, 5xx, 429; retried) or refused (permanent).",
			ConstLabels: role,
		}, []string{"result"}),
		misses: f.NewCounter(prometheus.CounterOpts{
			Name:        "walbox_schema_cache_misses_total",
			Help:        "Records whose subject's schema was not in the cache and was read from the registry (in the inferred mode: whose inferred schema was not cached and was registered).",
			ConstLabels: role,
		}),
		refreshes: f.NewCounter(prometheus.CounterOpts{
			Name:        "walbox_schema_latest_refreshes_total",
			Help:        "Reads of a subject's latest version because its cached schema was older than --schema-latest-ttl.",
			ConstLabels: role,
		}),
		now: time.Now,
	}
	for _, r := range []string{"ok", "transient", "refused"} {
		e.requests.WithLabelValues(r)
	}
	return e, nil
}

// Encode appends the wire-format record of the JSON payload doc for topic
// to dst: the header, then the body. A payload that does not fit is a
// *PayloadError (ErrInvalidPayload); a registry fault met on a cache miss is
// a *RegistryError (ErrRegistryUnavailable or ErrRegistryRefused).
func (e *Encoder) Encode(ctx context.Context, dst []byte, topic string, doc []byte) ([]byte, error) {
	if e.cfg.Format == FormatPreEncoded {
		return e.preEncoded(ctx, dst, doc)
	}
	subject := e.cfg.Subject(topic)
	if e.cfg.Source == Inferred {
		return e.encodeInferred(ctx, dst, subject, doc)
	}
	r, ok := e.cache.Get(subject)
	if !ok {
		e.misses.Inc()
		var err error
		if r, err = e.resolve(ctx, subject); err != nil {
			return dst, err
		}
		e.cache.Add(subject, r)
	} else if e.cfg.LatestTTL > 0 && e.now().Sub(r.fetched) >= e.cfg.LatestTTL {
		var err error
		if r, err = e.refresh(ctx, subject, r); err != nil {
			return dst, err
		}
	}
	n := len(dst)
	out, path, problem := r.codec.encode(append(dst, r.header...), doc)
	if problem != "" {
		return dst[:n], r.problemf(path, problem)
	}
	return out, nil
}

// EncodeValue is Encode for the router (router.ValueEncoder). The router
// has no context to give: a cache miss waits for the registry at most the
// client's retry budget (ClientConfig.RetryBudget) plus a request timeout.
func (e *Encoder) EncodeValue(dst []byte, topic string, payload []byte) ([]byte, error) {
	return e.Encode(context.Background(), dst, topic, payload)
}

// refresh reads subject's latest version again for LatestTTL: the new
// schema replaces old in the cache; when the registry is unavailable, old
// stays for another TTL.
func (e *Encoder) refresh(ctx context.Context, subject string, old *resolved) (*resolved, error) {
	e.refreshes.Inc()
	rctx, cancel := context.WithTimeout(ctx, latestRefreshWait)
	defer cancel()
	r, err := e.resolve(rctx, subject)
	switch {
	case err == nil:
	case errors.Is(err, ErrRegistryUnavailable) && ctx.Err() == nil:
		kept := *old
		kept.fetched = e.now()
		r = &kept
	default:
		return nil, err
	}
	e.cache.Add(subject, r)
	return r, nil
}

// KeyEncoder encodes record keys: the key's text (the aggregate id) is
// taken as a JSON string, so a key schema is an Avro "string" (or a union
// with one) or a JSON Schema of type string; the subject is "<topic>-key"
// under TopicName. It implements router.ValueEncoder for the router's Keys.
// Encoded keys are other bytes than the text: Kafka's default partitioner
// hashes them, so switching a topic's key format moves aggregates to other
// partitions.
type KeyEncoder struct{ *Encoder }

// NewKeyEncoder is NewEncoder for keys (cfg.Key set). Protobuf is refused:
// a Protobuf schema is a message, which a string is not.
func NewKeyEncoder(cfg Config, cl *Client, reg prometheus.Registerer) (KeyEncoder, error) {
	if cfg.Format == FormatProtobuf {
		return KeyEncoder{}, fmt.Errorf("%w: protobuf keys: a protobuf schema is a message and the key is the aggregate id's text; use avro or json-schema for keys", ErrInvalidConfig)
	}
	cfg.Key = true
	e, err := NewEncoder(cfg, cl, reg)
	return KeyEncoder{e}, err
}

// EncodeValue encodes key's text, as a JSON string, for a record on topic.
func (k KeyEncoder) EncodeValue(dst []byte, topic string, key []byte) ([]byte, error) {
	doc, err := json.Marshal(string(key))
	if err != nil {
		return dst, err
	}
	return k.Encode(context.Background(), dst, topic, doc)
}

// count counts a registry request's result, for what (a subject or "id
// N"), and keeps whether it failed transiently.
func (e *Encoder) count(err error, what string) {
	switch {
	case err == nil:
		e.requests.WithLabelValues("ok").Inc()
		e.failing.Store(nil)
	case errors.Is(err, ErrRegistryUnavailable):
		e.requests.WithLabelValues("transient").Inc()
		e.failing.Store(&what)
	default:
		e.requests.WithLabelValues("refused").Inc()
		e.failing.Store(nil)
	}
}

// maxReferenceDepth bounds how deep schema references are followed.
const maxReferenceDepth = 16

// resolve reads subject's schema and its references and compiles it.
func (e *Encoder) resolve(ctx context.Context, subject string) (*resolved, error) {
	var (
		ss  sr.SubjectSchema
		err error
	)
	switch {
	case e.cfg.ID > 0:
		ss, err = e.cl.SchemaByID(ctx, subject, e.cfg.ID)
	case e.cfg.Version > 0:
		ss, err = e.cl.SchemaByVersion(ctx, subject, e.cfg.Version)
	default:
		ss, err = e.cl.SchemaByVersion(ctx, subject, -1)
	}
	e.count(err, subject)
	if err != nil {
		return nil, err
	}
	refuse := func(fix string, cause error) error {
		return &RegistryError{Op: "use the schema", Subject: subject, Version: ss.Version, ID: ss.ID, Fix: fix, Err: cause}
	}
	if ss.Type != e.cfg.Format.srType() {
		return nil, refuse("the registry holds a "+ss.Type.String()+" schema but the format is "+string(e.cfg.Format)+
			"; set the format to match, or register a "+e.cfg.Format.srType().String()+" schema", nil)
	}
	var refs []reference
	seen := map[string]bool{}
	if err := e.references(ctx, ss.References, &refs, seen, 0); err != nil {
		return nil, err
	}
	r := &resolved{subject: subject, version: ss.Version, id: ss.ID, fetched: e.now()}
	r.problemf = func(path, problem string) *PayloadError {
		return &PayloadError{Subject: r.subject, Version: r.version, ID: r.id, Path: path, Problem: problem}
	}
	var index []int
	switch e.cfg.Format {
	case FormatAvro:
		r.codec, err = newAvroCodec(ss.Schema.Schema, refs)
	case FormatJSONSchema:
		r.codec, err = newJSONSchemaCodec(ss.Schema.Schema, refs)
	case FormatProtobuf:
		var pc *protoCodec
		pc, err = newProtoCodec(ss.Schema.Schema, refs, e.cfg.ProtobufMessage)
		if pc != nil {
			r.codec, index = pc, pc.index
		}
	}
	if err != nil {
		return nil, refuse("the schema does not compile; fix it in the registry", err)
	}
	if ss.ID <= 0 || int64(ss.ID) > 1<<31-1 {
		return nil, refuse("the registry answered the schema id "+strconv.Itoa(ss.ID)+", which the wire format cannot carry", nil)
	}
	r.header = AppendHeader(nil, uint32(ss.ID), index)
	return r, nil
}

// references reads the schemas refs name, depth first, each once.
func (e *Encoder) references(ctx context.Context, refs []sr.SchemaReference, out *[]reference, seen map[string]bool, depth int) error {
	if depth > maxReferenceDepth {
		return &RegistryError{Op: "follow schema references", Subject: refs[0].Subject, Version: refs[0].Version,
			Fix: "references nest deeper than " + strconv.Itoa(maxReferenceDepth) + " (a cycle?)"}
	}
	for _, ref := range refs {
		if seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		ss, err := e.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		e.count(err, ref.Subject)
		if err != nil {
			return err
		}
		if err := e.references(ctx, ss.References, out, seen, depth+1); err != nil {
			return err
		}
		*out = append(*out, reference{name: ref.Name, text: ss.Schema.Schema})
	}
	return nil
}
