package outboxtest

import "testing"

// TestAllOf: the condition holds only once every written id has arrived,
// whatever the order, repeats and foreign records, and it keeps what it
// learned across calls on the growing slice ReadUntil passes.
func TestAllOf(t *testing.T) {
	rec := func(id string) Received { return Received{Headers: map[string]string{"event_id": id}} }
	written := []Event{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	for _, tc := range []struct {
		name  string
		calls [][]string // the slice's contents at each call
		want  []bool
	}{
		{"in order", [][]string{{"a"}, {"a", "b"}, {"a", "b", "c"}}, []bool{false, false, true}},
		{"last first", [][]string{{"c"}, {"c", "a"}, {"c", "a", "b"}}, []bool{false, false, true}},
		{"repeats and foreign ids", [][]string{{"a", "a", "x"}, {"a", "a", "x", "c", "c"}}, []bool{false, false}},
		{"all at once", [][]string{{"b", "c", "a"}}, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := AllOf(written)
			for i, ids := range tc.calls {
				var got []Received
				for _, id := range ids {
					got = append(got, rec(id))
				}
				if d := done(got); d != tc.want[i] {
					t.Fatalf("call %d with %v: %v, want %v", i, ids, d, tc.want[i])
				}
			}
		})
	}
	if !AllOf(nil)(nil) {
		t.Error("nothing written: the condition must hold at once")
	}
}
