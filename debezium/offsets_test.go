package debezium

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// testdata/connect.offsets was written by Java 17's ObjectOutputStream from
// a HashMap<byte[], byte[]> as FileOffsetBackingStore.save builds it: the
// Debezium connector's entry, a deleted entry (null value) and another
// connector's.
func TestReadOffsetsFile(t *testing.T) {
	entries, err := ReadOffsetsFile("testdata/connect.offsets")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3", len(entries))
	}
	o, err := FindOffset(entries, "outbox-connector", "dbserver1")
	if err != nil {
		t.Fatal(err)
	}
	want := Offset{LSN: 23456792, LSNProc: 23456792, LSNCommit: 23456700, TxID: 751, TsUsec: 1764554400123456, MessageType: "INSERT"}
	if o != want {
		t.Errorf("offset = %+v, want %+v", o, want)
	}
	if o.Flushed() != 23456700 {
		t.Errorf("flushed = %s", o.Flushed())
	}
	_, err = FindOffset(entries, "other", "x")
	if !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), "deleted offset") {
		t.Errorf("deleted: %v", err)
	}
	_, err = FindOffset(entries, "outbox-connector", "wrong")
	if !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), "check name and topic.prefix") || !strings.Contains(err.Error(), `outbox-connector`) {
		t.Errorf("wrong prefix: %v", err)
	}
}

func TestParseOffset(t *testing.T) {
	tests := []struct {
		in      string
		want    Offset
		flushed pglogrepl.LSN
		wantErr string
	}{
		{in: `{"lsn":100}`, want: Offset{LSN: 100}, flushed: 100},
		{in: `{"lsn":100,"lsn_proc":90}`, want: Offset{LSN: 100, LSNProc: 90}, flushed: 90},
		{in: `{"lsn":100,"lsn_proc":90,"lsn_commit":80,"txId":7,"ts_usec":5,"snapshot":true}`, want: Offset{LSN: 100, LSNProc: 90, LSNCommit: 80, TxID: 7, TsUsec: 5, Snapshot: true, SnapshotType: "true"}, flushed: 80},
		{in: `{"lsn":18446744073709551615}`, want: Offset{LSN: 1<<64 - 1}, flushed: 1<<64 - 1},
		{in: `{"lsn":-1}`, wantErr: "not an LSN"},
		{in: `{"ts_usec":1}`, wantErr: "no lsn"},
		{in: `[1]`, wantErr: "not a JSON object"},
	}
	for _, tt := range tests {
		o, err := ParseOffset([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrOffsets) {
				t.Errorf("%s: err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || o != tt.want || o.Flushed() != tt.flushed {
			t.Errorf("%s: %+v (flushed %s), %v; want %+v (flushed %s)", tt.in, o, o.Flushed(), err, tt.want, tt.flushed)
		}
	}
}

func TestMatchOffsetKey(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want bool
	}{
		{`["c",{"server":"p"}]`, true},
		{` [ "c" , { "server" : "p" } ] `, true},
		{`["c",{"server":"q"}]`, false},
		{`["d",{"server":"p"}]`, false},
		{`["c",{"server":"p","x":1}]`, false},
		{`{"c":1}`, false},
	} {
		if got := MatchOffsetKey([]byte(tt.key), "c", "p"); got != tt.want {
			t.Errorf("%s: %t", tt.key, got)
		}
	}
	if !MatchOffsetKey(OffsetKey("c", "p"), "c", "p") {
		t.Error("OffsetKey does not match itself")
	}
}

// javaHashMap serializes entries as ObjectOutputStream does a
// HashMap<byte[], byte[]> (the layout of testdata/connect.offsets), for
// fuzz seeds.
func javaHashMap(entries [][2][]byte) []byte {
	b := []byte{0xac, 0xed, 0, 5, tcObject, tcClassDesc}
	str := func(s string) { b = binary.BigEndian.AppendUint16(b, uint16(len(s))); b = append(b, s...) }
	str("java.util.HashMap")
	b = append(b, 0x05, 0x07, 0xda, 0xc1, 0xc3, 0x16, 0x60, 0xd1, 0x03, 0, 2, 'F')
	str("loadFactor")
	b = append(b, 'I')
	str("threshold")
	b = append(b, tcEndBlockData, tcNull, 0x3f, 0x40, 0, 0, 0, 0, 0, 12, tcBlockData, 8, 0, 0, 0, 16)
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	handle, arrayDesc := uint32(javaBaseHandle+2), uint32(0)
	arr := func(v []byte) {
		if v == nil {
			b = append(b, tcNull)
			return
		}
		b = append(b, tcArray)
		if arrayDesc == 0 {
			b = append(b, tcClassDesc)
			str("[B")
			b = append(b, 0xac, 0xf3, 0x17, 0xf8, 0x06, 0x08, 0x54, 0xe0, 0x02, 0, 0, tcEndBlockData, tcNull)
			arrayDesc = handle
			handle++
		} else {
			b = append(b, tcReference)
			b = binary.BigEndian.AppendUint32(b, arrayDesc)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
		handle++
	}
	for _, e := range entries {
		arr(e[0])
		arr(e[1])
	}
	return append(b, tcEndBlockData)
}

func FuzzParseOffsetsFile(f *testing.F) {
	real, _ := ReadOffsetsFileBytes("testdata/connect.offsets")
	f.Add(real)
	f.Add(javaHashMap(nil))
	f.Add(javaHashMap([][2][]byte{{[]byte(`["c",{"server":"p"}]`), []byte(`{"lsn":1}`)}, {nil, nil}}))
	f.Add([]byte{0xac, 0xed, 0, 5})
	f.Add(deepClassChain(50_000)) // recursed without bound before
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseOffsetsFile(data)
		if err != nil {
			if !errors.Is(err, ErrOffsets) {
				t.Fatalf("error %v does not wrap ErrOffsets", err)
			}
			return
		}
		// What was read serializes back to what reads the same.
		again, err := ParseOffsetsFile(javaHashMap(entries))
		if err != nil || len(again) != len(entries) {
			t.Fatalf("round trip: %d entries, %v", len(again), err)
		}
	})
}

func TestJavaHashMapMatchesJava(t *testing.T) {
	real, err := ReadOffsetsFileBytes("testdata/connect.offsets")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ParseOffsetsFile(real)
	if err != nil {
		t.Fatal(err)
	}
	if got := javaHashMap(entries); string(got) != string(real) {
		t.Errorf("the test encoder differs from Java's output:\n got %x\nwant %x", got, real)
	}
}

func ReadOffsetsFileBytes(path string) ([]byte, error) { return os.ReadFile(path) }

// Connect overwrites its offsets file in place: killed while writing, it
// leaves a prefix, which Connect reads as "no offsets".
func TestTruncatedOffsetsFile(t *testing.T) {
	real, err := os.ReadFile("testdata/connect.offsets")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 4, 5, 40, len(real) / 2, len(real) - 1} {
		_, err := ParseOffsetsFile(real[:n])
		if !errors.Is(err, ErrOffsetsTruncated) || !errors.Is(err, ErrOffsets) {
			t.Errorf("first %d bytes: %v, want ErrOffsetsTruncated", n, err)
		}
	}
}

// How many of the change events at an offset's LSN it covers, for every
// message type Debezium stores and with and without lsn_events_processed
// (Debezium 3.7+), over 0, 1 and 50 events at that LSN (a 50-row COPY).
// Never more than Debezium processed: an event covered and not sent is
// lost, one sent again is a duplicate consumers drop by id.
func TestSentAtLSN(t *testing.T) {
	tests := []struct {
		typ       string
		processed int64
		want      [3]int // for 0, 1 and 50 events at the LSN
	}{
		{"COMMIT", 0, [3]int{0, 1, 50}},
		{"INSERT", 0, [3]int{0, 1, 1}},
		{"INSERT", 1, [3]int{0, 1, 1}},
		{"INSERT", 10, [3]int{0, 1, 10}},
		{"INSERT", 50, [3]int{0, 1, 50}},
		{"INSERT", 70, [3]int{0, 1, 50}},
		{"UPDATE", 0, [3]int{0, 1, 1}},
		{"DELETE", 3, [3]int{0, 1, 3}},
		{"TRUNCATE", 2, [3]int{0, 1, 2}},
		{"BEGIN", 0, [3]int{0, 0, 0}},
		{"BEGIN", 10, [3]int{0, 0, 0}},
		{"MESSAGE", 10, [3]int{0, 0, 0}},
		{"", 0, [3]int{0, 0, 0}},
		{"", 10, [3]int{0, 0, 0}},
		{"ORIGIN", 0, [3]int{0, 0, 0}},
		{"SOMETHING_NEW", 10, [3]int{0, 0, 0}},
	}
	for _, tt := range tests {
		o := Offset{LSN: 100, MessageType: tt.typ, LSNEventsProcessed: tt.processed}
		for i, n := range []int{0, 1, 50} {
			if got := o.SentAtLSN(n, false); got != tt.want[i] {
				t.Errorf("messageType %q, lsn_events_processed %d, %d events at lsn: %d covered, want %d", tt.typ, tt.processed, n, got, tt.want[i])
			}
		}
	}
}

// With the transaction's Begin at the offset's LSN (a COPY opening its
// transaction), lsn_events_processed over 1 covers one event fewer: a
// Debezium 3.7 that restarted from an offset inside those events counts
// the Begin among them, and stamps each event it sends after with one more
// than it has sent. Before, 10 covered 10 there, one row Debezium had not
// sent.
func TestSentAtLSNBeginAtLSN(t *testing.T) {
	tests := []struct {
		typ       string
		processed int64
		want      [3]int // for 0, 1 and 50 events at the LSN
	}{
		{"COMMIT", 0, [3]int{0, 1, 50}},
		{"INSERT", 0, [3]int{0, 1, 1}},
		{"INSERT", 1, [3]int{0, 1, 1}},
		{"INSERT", 2, [3]int{0, 1, 1}},
		{"INSERT", 10, [3]int{0, 1, 9}},
		{"INSERT", 50, [3]int{0, 1, 49}},
		{"INSERT", 51, [3]int{0, 1, 50}},
		{"BEGIN", 0, [3]int{0, 0, 0}},
		{"", 10, [3]int{0, 0, 0}},
	}
	for _, tt := range tests {
		o := Offset{LSN: 100, MessageType: tt.typ, LSNEventsProcessed: tt.processed}
		for i, n := range []int{0, 1, 50} {
			if got := o.SentAtLSN(n, true); got != tt.want[i] {
				t.Errorf("Begin at lsn, messageType %q, lsn_events_processed %d, %d events at lsn: %d covered, want %d", tt.typ, tt.processed, n, got, tt.want[i])
			}
		}
	}
}

func TestParseOffsetFields(t *testing.T) {
	o, err := ParseOffset([]byte(`{"lsn":100,"lsn_proc":100,"lsn_commit":90,"txId":7,"ts_usec":5,"messageType":"INSERT","lsn_events_processed":12,"xmin":3}`))
	want := Offset{LSN: 100, LSNProc: 100, LSNCommit: 90, TxID: 7, TsUsec: 5, MessageType: "INSERT", LSNEventsProcessed: 12}
	if err != nil || o != want {
		t.Errorf("%+v, %v; want %+v", o, err, want)
	}
	for in, want := range map[string]string{
		`{"lsn":1,"incremental_snapshot_collections":"[{\"incremental_snapshot_collections_id\":\"public.outbox\"}]"}`: `[{"incremental_snapshot_collections_id":"public.outbox"}]`,
		`{"lsn":1,"incremental_snapshot_primary_key":"aced"}`:                                                          "incremental_snapshot_primary_key",
		`{"lsn":1,"incremental_snapshot_collections":null,"incremental_snapshot_primary_key":null}`:                    "",
		`{"lsn":1,"incremental_snapshot_collections":"[]"}`:                                                            "",
	} {
		o, err := ParseOffset([]byte(in))
		if err != nil || o.IncrementalSnapshot != want {
			t.Errorf("%s: incremental snapshot %q, %v; want %q", in, o.IncrementalSnapshot, err, want)
		}
	}
	_, err = ParseOffset([]byte(`{"lsn":1,"zeta":1,"alpha":2}`))
	if !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), `["alpha" "zeta"]`) {
		t.Errorf("unknown keys: %v", err)
	}
}
