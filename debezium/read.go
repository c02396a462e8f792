package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
)

// ReadFile reads a connector or worker configuration: JSON when the file's
// first non-blank character is '{' (Connect's REST body
// {"name": ..., "config": {...}} or the bare config map), else
// java.util.Properties. Errors wrap ErrSyntax, or fs.ErrNotExist for a
// missing file.
func ReadFile(path string) (*Properties, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		cause := err
		if pe, ok := err.(*fs.PathError); ok {
			cause = pe.Err
		}
		return nil, fmt.Errorf("debezium: cannot read %q: %w", path, cause)
	}
	return Parse(path, data)
}

// Parse reads data as ReadFile does; source names it in messages.
func Parse(source string, data []byte) (*Properties, error) {
	if t := bytes.TrimLeft(data, " \t\r\n\f\ufeff"); len(t) > 0 && t[0] == '{' {
		return ParseJSON(source, data)
	}
	return ParseProperties(source, data)
}

// ParseJSON reads the JSON Connect's REST API takes: either
// {"name": "...", "config": {...}} (POST /connectors; "name" becomes the
// name key unless config has one) or the bare config map (PUT
// /connectors/NAME/config). Values may be strings, numbers or booleans
// (Connect turns them into strings); null, arrays and objects are errors
// naming the key. Keys are kept in sorted order.
func ParseJSON(source string, data []byte) (*Properties, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("%w: %s: not a JSON object of connector settings: %v", ErrSyntax, source, jsonSyntaxError(err))
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: text after the JSON object", ErrSyntax, source)
	}
	conf := top
	name := ""
	if raw, ok := top["config"]; ok {
		conf = nil
		if err := json.Unmarshal(raw, &conf); err != nil || conf == nil {
			return nil, fmt.Errorf("%w: %s: \"config\" must be an object of settings", ErrSyntax, source)
		}
		for k := range top {
			if k != "config" && k != "name" {
				return nil, fmt.Errorf("%w: %s: unexpected top-level field %q next to \"config\" (Connect's REST body has only name and config)", ErrSyntax, source, k)
			}
		}
		if raw, ok := top["name"]; ok {
			if err := json.Unmarshal(raw, &name); err != nil {
				return nil, fmt.Errorf("%w: %s: \"name\" must be a string", ErrSyntax, source)
			}
		}
	}
	keys := make([]string, 0, len(conf))
	m := make(map[string]string, len(conf)+1)
	for k, raw := range conf {
		v, err := jsonScalar(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: key %q: %v", ErrSyntax, source, k, err)
		}
		keys = append(keys, k)
		m[k] = v
	}
	if _, ok := m["name"]; !ok && name != "" {
		m["name"] = name
		keys = append(keys, "name")
	}
	sort.Strings(keys)
	return NewProperties(source, m, keys), nil
}

// jsonSyntaxError describes err without the character it found, which
// may be part of a password: encoding/json's message quotes it.
func jsonSyntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("JSON syntax error at byte %d", se.Offset)
	}
	return err
}

func jsonScalar(raw json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", jsonSyntaxError(err)
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", fmt.Errorf("null is not a value; remove the key or give a string")
	default:
		return "", fmt.Errorf("expected a string, number or boolean, not %s", bytes.TrimSpace(raw)[:1])
	}
}
