package debezium

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Kafka Connect standalone's FileOffsetBackingStore writes its offsets as
// one Java-serialized java.util.HashMap<byte[], byte[]>
// (ObjectOutputStream.writeObject), keys and values being the JSON that
// Connect's internal converter made of each source partition and offset.
// This file reads exactly that shape of the Java Object Serialization
// Stream Protocol and nothing else: the stream header, the HashMap object
// with its class descriptor (fields loadFactor and threshold), its
// writeObject block data (capacity, size) and then size pairs of byte[]
// or null.

// Java serialization stream constants.
const (
	javaMagic         = 0xaced
	javaVersion       = 5
	tcNull            = 0x70
	tcReference       = 0x71
	tcClassDesc       = 0x72
	tcObject          = 0x73
	tcString          = 0x74
	tcArray           = 0x75
	tcEndBlockData    = 0x78
	tcBlockData       = 0x77
	tcBlockDataLong   = 0x7a
	javaBaseHandle    = 0x7e0000
	maxOffsetsEntries = 1 << 20
	// maxOffsetsFileBytes bounds the offsets file: Connect's holds one
	// small JSON key and value per connector, a few kilobytes.
	maxOffsetsFileBytes = 16 << 20
	// maxClassDepth bounds a class descriptor's superclass chain, read
	// recursively: HashMap's has none, and an unbounded one (a crafted
	// file) would exhaust the goroutine stack, a fatal error that recover
	// does not catch.
	maxClassDepth = 8
)

// ErrOffsetsTruncated marks an offsets file that ends early: Connect was
// killed while writing it (FileOffsetBackingStore overwrites it in place).
// Connect itself then starts with no offsets; so does Debezium, from the
// slot's confirmed position. It wraps ErrOffsets.
var ErrOffsetsTruncated = fmt.Errorf("%w: the offsets file ends early (Connect was stopped while writing it)", ErrOffsets)

// ReadOffsetsFile reads Connect standalone's offset.storage.file.filename
// and returns its entries (key, value; either may be nil).
func ReadOffsetsFile(path string) ([][2][]byte, error) {
	data, err := readBounded(path, maxOffsetsFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read the offsets file %q: %v; give Connect standalone's offset.storage.file.filename "+
			"(if Debezium never stored an offset, because it stopped before its first offset flush, it would itself restart from the slot's confirmed position: "+
			"start walbox run with the same --debezium-config instead, which does the same)", ErrOffsets, path, err)
	}
	entries, err := ParseOffsetsFile(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %q)", err, path)
	}
	return entries, nil
}

// readBounded reads the file at path, failing on one of more than limit
// bytes without reading it whole.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("the file is larger than %d bytes, which no Connect offsets file is", limit)
	}
	return data, nil
}

// ParseOffsetsFile parses the content of a FileOffsetBackingStore file. It
// never panics; anything other than a HashMap of byte arrays is an error
// wrapping ErrOffsets.
func ParseOffsetsFile(data []byte) (entries [][2][]byte, err error) {
	r := &javaReader{b: data}
	defer func() {
		if p := recover(); p != nil {
			if _, short := p.(truncated); short {
				entries, err = nil, fmt.Errorf("%w: %v", ErrOffsetsTruncated, p)
				return
			}
			entries, err = nil, fmt.Errorf("%w: not a Connect offsets file: %v", ErrOffsets, p)
		}
	}()
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrOffsetsTruncated)
	}
	if len(data) > maxOffsetsFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, larger than %d bytes, which no Connect offsets file is", ErrOffsets, len(data), maxOffsetsFileBytes)
	}
	if r.u16() != javaMagic || r.u16() != javaVersion {
		return nil, fmt.Errorf("%w: not a Java serialization stream (Connect standalone's offsets file starts with AC ED 00 05)", ErrOffsets)
	}
	if r.u8() != tcObject {
		return nil, fmt.Errorf("%w: the stream does not start with an object", ErrOffsets)
	}
	desc := r.classDesc(0)
	if desc == nil || desc.name != "java.util.HashMap" {
		return nil, fmt.Errorf("%w: expected a java.util.HashMap, found %s", ErrOffsets, desc.String())
	}
	r.newHandle(nil) // the HashMap object
	// Field values of HashMap's serializable fields (primitives only), then
	// its writeObject data.
	for _, f := range desc.fields {
		r.skipPrimitive(f)
	}
	block := r.blockData()
	if len(block) < 8 {
		return nil, fmt.Errorf("%w: HashMap block data of %d bytes, expected capacity and size", ErrOffsets, len(block))
	}
	size := int32(binary.BigEndian.Uint32(block[4:8]))
	if size < 0 || size > maxOffsetsEntries {
		return nil, fmt.Errorf("%w: HashMap of %d entries", ErrOffsets, size)
	}
	for range size {
		k := r.byteArrayOrNull()
		v := r.byteArrayOrNull()
		entries = append(entries, [2][]byte{k, v})
	}
	// The end of HashMap's writeObject data.
	if tc := r.u8(); tc != tcEndBlockData {
		return nil, fmt.Errorf("%w: expected the end of the HashMap, found type code 0x%02x", ErrOffsets, tc)
	}
	return entries, nil
}

type javaClassDesc struct {
	name   string
	fields []byte // type codes
	super  *javaClassDesc
}

func (d *javaClassDesc) String() string {
	if d == nil {
		return "null"
	}
	return d.name
}

type javaReader struct {
	b       []byte
	pos     int
	handles []any
}

// truncated is the panic value of a read past the end.
type truncated string

func (r *javaReader) need(n int) []byte {
	if n < 0 {
		panic(fmt.Sprintf("negative length %d at byte %d", n, r.pos))
	}
	if r.pos+n > len(r.b) {
		panic(truncated(fmt.Sprintf("truncated at byte %d (need %d more)", r.pos, n)))
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s
}

func (r *javaReader) u8() byte        { return r.need(1)[0] }
func (r *javaReader) u16() uint16     { return binary.BigEndian.Uint16(r.need(2)) }
func (r *javaReader) u32() uint32     { return binary.BigEndian.Uint32(r.need(4)) }
func (r *javaReader) utf() string     { return string(r.need(int(r.u16()))) }
func (r *javaReader) newHandle(v any) { r.handles = append(r.handles, v) }

func (r *javaReader) handle() any {
	h := int(r.u32()) - javaBaseHandle
	if h < 0 || h >= len(r.handles) {
		panic(fmt.Sprintf("reference to unknown handle %d", h))
	}
	return r.handles[h]
}

// classDesc reads a class descriptor: TC_CLASSDESC, TC_REFERENCE or
// TC_NULL; depth counts the subclass descriptors it is the superclass of.
func (r *javaReader) classDesc(depth int) *javaClassDesc {
	if depth > maxClassDepth {
		panic(fmt.Sprintf("a superclass chain deeper than %d class descriptors at byte %d", maxClassDepth, r.pos))
	}
	switch tc := r.u8(); tc {
	case tcNull:
		return nil
	case tcReference:
		d, ok := r.handle().(*javaClassDesc)
		if !ok {
			panic("a reference that is not a class descriptor")
		}
		return d
	case tcClassDesc:
		d := &javaClassDesc{name: r.utf()}
		r.need(8) // serialVersionUID
		r.newHandle(d)
		r.u8() // flags
		n := int(r.u16())
		for range n {
			code := r.u8()
			r.utf() // field name
			switch code {
			case 'B', 'C', 'D', 'F', 'I', 'J', 'S', 'Z':
			case 'L', '[':
				r.stringObject() // the field's class name
			default:
				panic(fmt.Sprintf("unknown field type code %q", code))
			}
			d.fields = append(d.fields, code)
		}
		if r.u8() != tcEndBlockData { // no class annotations expected
			panic("class annotations are not supported")
		}
		d.super = r.classDesc(depth + 1)
		return d
	default:
		panic(fmt.Sprintf("expected a class descriptor, found type code 0x%02x", tc))
	}
}

func (r *javaReader) stringObject() {
	switch tc := r.u8(); tc {
	case tcString:
		r.newHandle(r.utf())
	case tcReference:
		r.handle()
	default:
		panic(fmt.Sprintf("expected a string, found type code 0x%02x", tc))
	}
}

func (r *javaReader) skipPrimitive(code byte) {
	switch code {
	case 'B', 'Z':
		r.need(1)
	case 'C', 'S':
		r.need(2)
	case 'F', 'I':
		r.need(4)
	case 'D', 'J':
		r.need(8)
	default:
		panic("HashMap with an object field")
	}
}

func (r *javaReader) blockData() []byte {
	switch tc := r.u8(); tc {
	case tcBlockData:
		return r.need(int(r.u8()))
	case tcBlockDataLong:
		return r.need(int(int32(r.u32())))
	default:
		panic(fmt.Sprintf("expected HashMap block data, found type code 0x%02x", tc))
	}
}

func (r *javaReader) byteArrayOrNull() []byte {
	switch tc := r.u8(); tc {
	case tcNull:
		return nil
	case tcReference:
		b, ok := r.handle().([]byte)
		if !ok {
			panic("a reference that is not a byte array")
		}
		return b
	case tcArray:
		d := r.classDesc(0)
		if d == nil || d.name != "[B" {
			panic(fmt.Sprintf("expected a byte[], found an array of %s", d.String()))
		}
		n := int(int32(r.u32()))
		b := append([]byte(nil), r.need(n)...)
		r.newHandle(b)
		return b
	default:
		panic(fmt.Sprintf("expected a byte[] or null, found type code 0x%02x", tc))
	}
}
