package schemareg

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoFile is the name the registry's schema is compiled under; references
// are compiled under their reference names, which are the import paths.
const protoFile = "walbox-schema.proto"

// protoCodec encodes JSON payloads as one Protobuf message. The JSON is read
// by the proto3 JSON mapping (protojson): field names as in the .proto or in
// lowerCamelCase, an unknown field is an error, 64-bit integers may be JSON
// numbers or strings as the mapping allows. The body is the message's
// deterministic binary encoding; index is its message-index list.
type protoCodec struct {
	md    protoreflect.MessageDescriptor
	index []int
}

func newProtoCodec(text string, refs []reference, message string) (*protoCodec, error) {
	srcs := map[string]string{protoFile: text}
	for _, r := range refs {
		srcs[r.name] = r.text
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(srcs),
		}),
	}
	files, err := c.Compile(context.Background(), protoFile)
	if err != nil {
		return nil, err
	}
	fd := files[0]
	var md protoreflect.MessageDescriptor
	if message == "" {
		if fd.Messages().Len() == 0 {
			return nil, errors.New("the .proto file declares no message")
		}
		md = fd.Messages().Get(0)
	} else {
		d := fd.FindDescriptorByName(protoreflect.FullName(message))
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			var names []string
			for i := range fd.Messages().Len() {
				names = append(names, string(fd.Messages().Get(i).FullName()))
			}
			return nil, errors.New("the .proto file declares no message " + message + " (top-level messages: " + strings.Join(names, ", ") + ")")
		}
		md = m
	}
	return &protoCodec{md: md, index: messageIndex(md)}, nil
}

// messageIndex is md's path from the file: its index among the file's
// top-level messages, then among each enclosing message's nested messages.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var idx []int
	for d := protoreflect.Descriptor(md); ; d = d.Parent() {
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			break
		}
		idx = append(idx, m.Index())
	}
	slices.Reverse(idx)
	return idx
}

func (c *protoCodec) encode(dst, doc []byte) ([]byte, string, string) {
	m := dynamicpb.NewMessage(c.md)
	if err := protojson.Unmarshal(doc, m); err != nil {
		// protojson names the field and the value in its message.
		return dst, "$", "not a " + string(c.md.FullName()) + " in the proto3 JSON mapping: " +
			strings.TrimPrefix(strings.TrimPrefix(err.Error(), "proto:"), "\u00a0")
	}
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, m)
	if err != nil {
		return dst, "$", "the Protobuf encoder refused the message: " + err.Error()
	}
	return out, "", ""
}
