package main

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestStandbyHostsOfAMultiHostDSN(t *testing.T) {
	for _, tt := range []struct {
		dsn  string
		want []string
	}{
		{"host=db1,db2 port=5432,5433 user=walbox sslmode=disable target_session_attrs=read-write", []string{"db1:5432", "db2:5433"}},
		{"postgres://walbox@a:1,b:2,c:3/app?sslmode=disable", []string{"a:1", "b:2", "c:3"}},
		// sslmode=prefer makes a fallback of the same host without TLS.
		{"host=db1,db2 port=5432 user=walbox sslmode=prefer", []string{"db1:5432", "db2:5432"}},
	} {
		pc, err := pgconn.ParseConfig(tt.dsn)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range standbyHosts(pc) {
			got = append(got, h.addr)
			if h.cfg.ValidateConnect != nil || len(h.cfg.Fallbacks) != 0 {
				t.Errorf("%s: host %s keeps target_session_attrs or fallbacks", tt.dsn, h.addr)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: hosts %v, want %v", tt.dsn, got, tt.want)
		}
	}
}
