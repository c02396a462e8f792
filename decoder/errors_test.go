package decoder

import (
	"errors"
	"testing"
)

func TestErrorNamesPositionTypeAndCause(t *testing.T) {
	d := openTx(t)
	_, err := d.Decode(fixInsertLSN, cat([]byte{'I', 0x00, 0x00, 0x40, 0x02}, fixInsert[5:]))

	var de *Error
	if !errors.As(err, &de) {
		t.Fatalf("err %T is not an *Error", err)
	}
	if de.LSN != fixInsertLSN || de.Type != 'I' {
		t.Errorf("Error{LSN: %s, Type: %q}, want %s 'I'", de.LSN, de.Type, fixInsertLSN)
	}
	if !errors.Is(err, ErrUnknownRelation) {
		t.Error("errors.Is(err, ErrUnknownRelation) = false")
	}
	want := "decoder: Insert ('I') message at LSN 0/16B3690: " +
		"change for a relation with no preceding Relation message: relation OID 16386 " +
		"(the decoder must see every message since START_REPLICATION; was it Reset mid-session or a message skipped?)"
	if got := err.Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
}

func TestErrorSentinelsAreDistinct(t *testing.T) {
	sentinels := []error{ErrMalformed, ErrUnknownRelation, ErrProtocol, ErrStreamingUnsupported, ErrUnknownMessage}
	for i, a := range sentinels {
		for j, b := range sentinels {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, !(i == j))
			}
		}
	}
}

func TestMessageName(t *testing.T) {
	for typ, want := range map[byte]string{
		'B': "Begin ('B')", 'C': "Commit ('C')", 'M': "logical decoding ('M')",
		'c': "Stream Commit ('c')", 'z': "unknown ('z')", 0: `unknown ('\x00')`, 0xff: `unknown ('\u00ff')`,
	} {
		if got := messageName(typ); got != want {
			t.Errorf("messageName(%#x) = %q, want %q", typ, got, want)
		}
	}
}

// The recover in Decode is the second line of defence; check it turns a
// panic into an ErrMalformed *Error. No input reaches it (FuzzDecode checks
// that), so a nil receiver stands in for a parser bug.
func TestDecodeRecoversPanic(t *testing.T) {
	var d *Decoder
	got, err := d.Decode(fixCommitLSN, fixBegin)
	if got != nil {
		t.Errorf("result %#v alongside a recovered panic", got)
	}
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
	var pe *panicError
	if !errors.As(err, &pe) {
		t.Errorf("err %v does not carry the panic", err)
	}
	var de *Error
	if !errors.As(err, &de) || de.LSN != fixCommitLSN || de.Type != 'B' {
		t.Errorf("err %#v does not name the LSN and type", err)
	}
}
