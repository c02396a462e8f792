package debezium

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deepClassChain is a stream whose HashMap class descriptor has n
// superclass descriptors, each a TC_CLASSDESC: the reader recursed once
// per level without bound, and a long enough chain exhausts the goroutine
// stack, a fatal error that recover does not catch.
func deepClassChain(n int) []byte {
	b := []byte{0xac, 0xed, 0, 5, tcObject}
	desc := func(name string) {
		b = append(b, tcClassDesc)
		b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
		b = append(b, name...)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 1, 0x02, 0, 0, tcEndBlockData) // uid, flags, no fields, no annotations
	}
	desc("java.util.HashMap")
	for range n {
		desc("x")
	}
	return append(b, tcNull)
}

func TestParseOffsetsFileDeepClassChain(t *testing.T) {
	_, err := ParseOffsetsFile(deepClassChain(100_000))
	if !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), "superclass") {
		t.Errorf("err = %v, want a bounded-depth ErrOffsets", err)
	}
	// A HashMap's own chain (no superclass descriptor) still reads.
	if _, err := ParseOffsetsFile(javaHashMap(nil)); err != nil {
		t.Error(err)
	}
}

// An offsets file is a few kilobytes; walbox read any file whole.
func TestReadOffsetsFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "connect.offsets")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxOffsetsFileBytes + 1); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	_, err = ReadOffsetsFile(path)
	if !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("err = %v, want a size error", err)
	}
	if _, err := ParseOffsetsFile(make([]byte, maxOffsetsFileBytes+1)); !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("parse: err = %v, want a size error", err)
	}
}
