package decoder_test

import (
	"fmt"

	"github.com/walbox/walbox/decoder"
)

// A replication loop hands every XLogData to one Decoder, in order. The
// messages here are a Relation, Begin, Insert and Commit as pgoutput sends
// them; a real loop takes them from pglogrepl.ParseXLogData.
func ExampleDecoder_Decode() {
	msgs := [][]byte{
		// Relation 16385 public.outbox(id bigint), replica identity default.
		[]byte("R\x00\x00\x40\x01public\x00outbox\x00d\x00\x01\x01id\x00\x00\x00\x00\x14\xff\xff\xff\xff"),
		// Begin: final LSN 0/16B3748, commit time 2000-01-01, xid 750.
		[]byte("B\x00\x00\x00\x00\x01\x6b\x37\x48\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xee"),
		// Insert into 16385: ('42').
		[]byte("I\x00\x00\x40\x01N\x00\x01t\x00\x00\x00\x0242"),
		// Commit: commit LSN 0/16B3748, end LSN 0/16B3778.
		[]byte("C\x00\x00\x00\x00\x00\x01\x6b\x37\x48\x00\x00\x00\x00\x01\x6b\x37\x78\x00\x00\x00\x00\x00\x00\x00\x00"),
	}
	d := decoder.New()
	for _, m := range msgs {
		ev, err := d.Decode(0x016B3690, m)
		if err != nil {
			// Stop: nothing at or after this LSN may be confirmed.
			fmt.Println(err)
			return
		}
		switch ev := ev.(type) {
		case *decoder.Insert:
			fmt.Printf("insert into %s xid %d: id=%s\n", ev.Relation.QualifiedName(), ev.XID, ev.Values[0].Data)
		case *decoder.Commit:
			fmt.Printf("commit; confirm %s once delivered\n", ev.EndLSN)
		}
	}
	// Output:
	// insert into public.outbox xid 750: id=42
	// commit; confirm 0/16B3778 once delivered
}
