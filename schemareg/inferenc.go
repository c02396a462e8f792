package schemareg

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// SchemaSource says where the value's schema comes from.
type SchemaSource string

// The sources.
const (
	// Registered is the registered-contract mode: the schema is in the
	// registry already; the default.
	Registered SchemaSource = "registered"
	// Inferred derives an Avro schema from each payload by Debezium's
	// rules (table.expand.json.payload=true with Apicurio's
	// AvroConverter) and registers it under the subject.
	Inferred SchemaSource = "inferred"
)

// Sources lists the sources, for option help and validation.
var Sources = []string{string(Registered), string(Inferred)}

// DefaultPayloadColumn is the record name of an inferred schema when
// Config.PayloadColumn is empty: Debezium's default payload field.
const DefaultPayloadColumn = "payload"

// inferred is an inferred schema, registered: its id, compiled.
type inferred struct {
	id     int
	schema avro.Schema
	header []byte
}

// encodeInferred is Encode in the inferred mode.
func (e *Encoder) encodeInferred(ctx context.Context, dst []byte, subject string, doc []byte) ([]byte, error) {
	bad := func(path, problem string) error {
		return &PayloadError{Subject: subject, Path: path, Problem: problem}
	}
	// EventRouterDelegate.parseJsonPayload: the text must start with { (a
	// [ parses, but an array is no struct, and the expansion fails).
	if len(doc) == 0 || doc[0] != '{' {
		return dst, bad("$", "not a JSON object starting with '{': Debezium's JSON expansion fails on it and sends the payload as a string; "+
			"the inferred mode needs an object payload")
	}
	tree, err := parseJSONTree(doc)
	if err != nil {
		return dst, bad("$", "not valid JSON: "+err.Error())
	}
	column := e.cfg.PayloadColumn
	if column == "" {
		column = DefaultPayloadColumn
	}
	cs, ierr := inferSchema(column, true, tree, "$")
	if ierr != nil {
		return dst, bad(ierr.path, ierr.problem)
	}
	text, ierr := inferredAvro(cs)
	if ierr != nil {
		return dst, bad(ierr.path, ierr.problem)
	}
	key := subject + "\x00" + text
	inf, ok := e.inferredCache.Get(key)
	if !ok {
		e.misses.Inc()
		if inf, err = e.register(ctx, subject, text); err != nil {
			return dst, err
		}
		e.inferredCache.Add(key, inf)
	}
	native, ierr := inferredValue(cs, inf.schema, tree, "$")
	if ierr != nil {
		return dst, &PayloadError{Subject: subject, ID: inf.id, Path: ierr.path, Problem: ierr.problem}
	}
	body, err := inferredAvroConfig.Marshal(inf.schema, native)
	if err != nil {
		return dst, &PayloadError{Subject: subject, ID: inf.id, Path: "$", Problem: "the Avro encoder refused the value: " + err.Error()}
	}
	return append(append(dst, inf.header...), body...), nil
}

// register registers the inferred schema text under subject (or finds it
// registered: the registry answers the id it has) and compiles it.
func (e *Encoder) register(ctx context.Context, subject, text string) (*inferred, error) {
	schema, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		// The names were checked; a schema hamba/avro refuses is a case
		// the checks do not know, never produced.
		return nil, &PayloadError{Subject: subject, Path: "$", Problem: "the inferred Avro schema does not compile: " + err.Error()}
	}
	id, err := e.cl.Register(ctx, subject, sr.Schema{Schema: text, Type: sr.TypeAvro})
	e.count(err, subject)
	if err != nil {
		var re *RegistryError
		if errors.As(err, &re) && re.Status == http.StatusConflict {
			re.Fix = "the registry refuses the schema inferred from this payload as incompatible with the subject's earlier versions" +
				e.compatibility(ctx, subject) + "; change the subject's compatibility level, or the payload's shape (a field's type, a removed field)" +
				"; the schema: " + text
		}
		return nil, err
	}
	if id <= 0 || int64(id) > 1<<31-1 {
		return nil, &RegistryError{Op: "register the inferred schema", Subject: subject, ID: id,
			Fix: "the registry answered the schema id " + strconv.Itoa(id) + ", which the wire format cannot carry"}
	}
	return &inferred{id: id, schema: schema, header: AppendHeader(nil, uint32(id), nil)}, nil
}

// compatibility names the compatibility levels for a message, the
// subject's and the registry's (Apicurio answers NONE for a subject without
// a level of its own, whose global level then applies); "" when the
// registry says neither.
func (e *Encoder) compatibility(ctx context.Context, subject string) string {
	var parts []string
	if res := e.cl.cl.Compatibility(ctx, subject); len(res) == 1 && res[0].Err == nil {
		parts = append(parts, "the subject's compatibility level "+res[0].Level.String())
	}
	if res := e.cl.cl.Compatibility(ctx); len(res) == 1 && res[0].Err == nil {
		parts = append(parts, "the registry's "+res[0].Level.String())
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
