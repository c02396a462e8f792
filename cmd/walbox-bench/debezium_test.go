package main

import (
	"io"
	"testing"
)

func TestParseWithDebezium(t *testing.T) {
	o, err := parse([]string{"--with-debezium", "--events", "200000"}, io.Discard)
	if err != nil || !o.withDebezium || o.events != 200000 {
		t.Fatalf("parse = %+v, %v; want withDebezium and 200,000 events", o, err)
	}
	if o, _ := parse(nil, io.Discard); o.withDebezium {
		t.Error("Debezium runs without --with-debezium")
	}
}
