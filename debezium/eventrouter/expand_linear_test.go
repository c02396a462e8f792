package eventrouter

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The payload expansion was quadratic in an object's members (a linear
// search per member in the parser, the schema inference and the value
// conversion, and per field when merging array element schemas): 20,000
// members took 1.7 s, so one 1 MB payload with 100,000 keys stalled the
// relay for tens of seconds. It must be linear: 200,000 members, in an
// object and in two array elements, well within a few seconds.
func TestExpandJSONLinearInMembers(t *testing.T) {
	const n = 200_000
	var b strings.Builder
	members := func() {
		b.WriteByte('{')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":%d`, i, i)
		}
		b.WriteByte('}')
	}
	b.WriteString(`{"a":`)
	members()
	b.WriteString(`,"l":[`)
	members()
	b.WriteByte(',')
	members()
	b.WriteString(`]}`)
	payload := b.String()

	done := make(chan struct{})
	var (
		s       *schema
		v       any
		partial bool
	)
	go func() {
		defer close(done)
		s, v, partial = expandJSON("payload", payload, optString, false)
		// And the record's value through the converters.
		for _, c := range []ConverterConfig{{Kind: JSONConverter, SchemasEnable: true}, {Kind: JSONConverter}, {Kind: StringConverter}} {
			if _, err := convert(c, s, v); err != nil {
				t.Errorf("%+v: %v", c, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("expanding %d members did not finish in 10 s", 3*n)
	}
	st, ok := v.(*structVal)
	if partial || !ok || s.typ != kStruct || len(s.fields) != 2 {
		t.Fatalf("expansion: schema %v, value %T, partial %t", s.typ, v, partial)
	}
	if a := st.values[0].(*structVal); len(a.values) != n || a.values[n-1] != int32(n-1) {
		t.Errorf("object: %d values", len(a.values))
	}
}

// A repeated key keeps its first place and takes the last value, also
// past the size at which members are indexed.
func TestParseJacksonRepeatedKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"dup":1`)
	for i := range 50 {
		fmt.Fprintf(&b, `,"k%d":%d`, i, i)
	}
	b.WriteString(`,"dup":2,"k3":"x"}`)
	n, err := parseJackson(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(n.keys) != 51 || n.keys[0] != "dup" || n.vals[0].i != 2 || n.vals[4].s != "x" {
		t.Errorf("keys %d, first %q = %d, k3 = %+v", len(n.keys), n.keys[0], n.vals[0].i, n.vals[4])
	}
}
