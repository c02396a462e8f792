package schemareg

import (
	"bytes"
	"errors"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// jsonSchemaBase is where the schema and its references live for the
// compiler; nothing is loaded from it (the loader is empty).
const jsonSchemaBase = "mem://schemareg/"

// jsonSchemaCodec validates JSON payloads against one JSON Schema; the body
// is the payload as written.
type jsonSchemaCodec struct {
	schema *jsonschema.Schema
}

var jsonSchemaPrinter = message.NewPrinter(language.English)

func newJSONSchemaCodec(text string, refs []reference) (*jsonSchemaCodec, error) {
	c := jsonschema.NewCompiler()
	// Only what the registry holds: no $ref reaches the file system or
	// the network.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	for _, r := range refs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(r.text))
		if err != nil {
			return nil, errors.New("referenced schema " + r.name + ": " + err.Error())
		}
		if err := c.AddResource(jsonSchemaBase+r.name, doc); err != nil {
			return nil, err
		}
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	if err := c.AddResource(jsonSchemaBase+"schema.json", doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(jsonSchemaBase + "schema.json")
	if err != nil {
		return nil, err
	}
	return &jsonSchemaCodec{schema: s}, nil
}

func (c *jsonSchemaCodec) encode(dst, doc []byte) ([]byte, string, string) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return dst, "$", "not valid JSON: " + err.Error()
	}
	if err := c.schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return dst, "$", err.Error()
		}
		// The deepest first cause says what is wrong where; its parents
		// only say that a subschema failed.
		for len(ve.Causes) > 0 {
			ve = ve.Causes[0]
		}
		return dst, pointerPath(ve.InstanceLocation), ve.ErrorKind.LocalizedString(jsonSchemaPrinter)
	}
	return append(dst, doc...), "", ""
}

// pointerPath writes a JSON pointer's tokens as "$.a.b[2]".
func pointerPath(tokens []string) string {
	var b strings.Builder
	b.WriteByte('$')
	for _, t := range tokens {
		if t != "" && strings.Trim(t, "0123456789") == "" {
			b.WriteString("[" + t + "]")
		} else {
			b.WriteString("." + t)
		}
	}
	return b.String()
}
