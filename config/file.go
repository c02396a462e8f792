package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyFile applies the settings of a YAML file through set and returns
// the problems found, in file order: syntax errors, unknown or repeated
// keys, values of the wrong shape and the values set rejects.
//
// The file is decoded into a yaml.Node and walked against the options
// table rather than decoded into a struct with KnownFields(true): the table
// is the single declaration of the keys, and walking it lets an unknown key
// be reported with its line, a suggestion and the list of valid keys.
//
// A key with no value (or null) counts as unset; write "" for an empty
// string, e.g. metrics_addr: "" to disable metrics.
// shapeErr is passed to set instead of a value when the YAML node has the
// wrong shape (a list for a single value), so that set records the option
// as failed and reports err.
func applyFile(path string, data []byte, set func(o *option, v, where string, shapeErr error) error) []error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file, or only comments
		}
		return []error{problemf(nil, "config file %q is not valid YAML: %v", path, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return []error{problemf(nil, "config file %q is not valid YAML: %v", path, err)}
		}
		return []error{problemf(nil, "%s:%d: a second YAML document; put all settings in one mapping", path, extra.Line)}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := deref(doc.Content[0])
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return []error{problemf(nil, "%s:%d: expected a mapping of settings such as \"slot: walbox\", found %s", path, root.Line, kindName(root))}
	}
	f := fileWalker{path: path, set: set}
	f.walk(root, "")
	return f.errs
}

type fileWalker struct {
	path string
	set  func(o *option, v, where string, shapeErr error) error
	errs []error
}

func (f *fileWalker) where(n *yaml.Node) string { return fmt.Sprintf("%s:%d", f.path, n.Line) }

func (f *fileWalker) fail(n *yaml.Node, format string, args ...any) {
	f.errs = append(f.errs, problemf(nil, "%s: %s", f.where(n), fmt.Sprintf(format, args...)))
}

// walk applies a mapping whose keys are prefix + key.
func (f *fileWalker) walk(m *yaml.Node, prefix string) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := deref(m.Content[i]), deref(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			f.fail(k, "a key must be a plain name, found %s", kindName(k))
			continue
		}
		full := prefix + k.Value
		if line, dup := seen[k.Value]; dup {
			f.fail(k, "key %q is already set on line %d; keep one", full, line)
			continue
		}
		seen[k.Value] = k.Line

		// A dot would let "columns.id: x" reach a nested option; keys are
		// only ever plain names.
		dotted := strings.Contains(k.Value, ".")
		if o := optionByYAML(full); o != nil && !dotted {
			f.apply(o, v)
			continue
		}
		if keys := validKeys(full + "."); len(keys) > 0 && !dotted {
			switch {
			case isNull(v):
			case v.Kind == yaml.MappingNode:
				f.walk(v, full+".")
			default:
				f.fail(v, "%q must be a mapping with the keys %s, found %s", full, strings.Join(keys, ", "), kindName(v))
			}
			continue
		}
		f.fail(k, "%s", unknownKeyMessage(full, prefix))
	}
}

func (f *fileWalker) apply(o *option, v *yaml.Node) {
	where := f.where(v)
	switch {
	case isNull(v):
		return // unset: lower-precedence values stay
	case v.Kind == yaml.ScalarNode:
		f.setValue(o, v.Value, where)
	case v.Kind == yaml.SequenceNode && o.value.list:
		items := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			item = deref(item)
			if item.Kind != yaml.ScalarNode {
				f.fail(item, "%q: list items must be single values such as localhost:9092, found %s", o.yaml, kindName(item))
				return
			}
			items = append(items, item.Value)
		}
		f.setValue(o, strings.Join(items, ","), where)
	default:
		shown := "[...]"
		if v.Kind == yaml.MappingNode {
			shown = "{...}"
		}
		if err := f.set(o, shown, where, fmt.Errorf("expected a single value, found %s; %s", kindName(v), o.value.expect)); err != nil {
			f.errs = append(f.errs, err)
		}
	}
}

func (f *fileWalker) setValue(o *option, v, where string) {
	if err := f.set(o, v, where, nil); err != nil {
		f.errs = append(f.errs, err)
	}
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an unexpected YAML node"
}

func optionByYAML(key string) *option {
	for _, o := range options {
		if o.yaml != "" && o.yaml == key {
			return o
		}
	}
	return nil
}

// validKeys lists the keys allowed in the mapping at prefix ("" for the
// top level, "columns." for the columns section), sorted.
func validKeys(prefix string) []string {
	var keys []string
	for _, o := range options {
		rest, ok := strings.CutPrefix(o.yaml, prefix)
		if o.yaml == "" || !ok {
			continue
		}
		if i := strings.IndexByte(rest, '.'); i >= 0 {
			rest = rest[:i]
		}
		if !slices.Contains(keys, rest) {
			keys = append(keys, rest)
		}
	}
	slices.Sort(keys)
	return keys
}

func unknownKeyMessage(full, prefix string) string {
	keys := validKeys(prefix)
	key := strings.TrimPrefix(full, prefix)
	msg := fmt.Sprintf("unknown key %q", full)
	if s := closest(key, keys); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", prefix+s)
	}
	where := "valid keys"
	if prefix != "" {
		where = fmt.Sprintf("valid keys under %q", strings.TrimSuffix(prefix, "."))
	}
	return fmt.Sprintf("%s; %s: %s", msg, where, strings.Join(keys, ", "))
}

// closest returns the candidate nearest to key in edit distance, if it is
// near enough to be a plausible typo.
func closest(key string, candidates []string) string {
	best, bestDist := "", len(key)/3+2
	for _, c := range candidates {
		if d := editDistance(key, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" {
		return best
	}
	// slot_name, kafka_broker: the valid key with extra or fewer letters.
	for _, c := range candidates {
		if len(c) >= 3 && len(key) >= 3 && (strings.HasPrefix(key, c) || strings.HasPrefix(c, key)) {
			return c
		}
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
