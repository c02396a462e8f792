package debeziumtest

import (
	"strings"
	"testing"
)

func TestConnectorPropertiesMerge(t *testing.T) {
	pg := PG{Port: 5433, DBName: "shop"}
	got := merge(DefaultConnectorProperties("", pg), map[string]string{
		"snapshot.mode":                           "", // removed
		"transforms.outbox.route.by.field":        "type",
		"table.include.list":                      "public.orders_outbox",
		"transforms.outbox.table.field.event.key": "aggregate_id",
	})
	want := map[string]string{
		"name":                                    DefaultName,
		"connector.class":                         ConnectorClass,
		"database.hostname":                       "127.0.0.1",
		"database.port":                           "5433",
		"database.user":                           "postgres",
		"database.dbname":                         "shop",
		"plugin.name":                             "pgoutput",
		"slot.name":                               DefaultSlot,
		"publication.name":                        DefaultPublication,
		"publication.autocreate.mode":             "filtered",
		"table.include.list":                      "public.orders_outbox",
		"transforms":                              "outbox",
		"transforms.outbox.type":                  EventRouter,
		"transforms.outbox.route.by.field":        "type",
		"key.converter":                           StringConverter,
		"value.converter":                         StringConverter,
		"transforms.outbox.table.field.event.key": "aggregate_id",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["snapshot.mode"]; ok {
		t.Errorf("snapshot.mode = %q, want it removed by an empty override", got["snapshot.mode"])
	}
}

func TestWorkerPropertiesMerge(t *testing.T) {
	got := merge(defaultWorkerProperties("127.0.0.1:9092", "127.0.0.1:8083", "/tmp/o.dat"),
		map[string]string{"offset.flush.interval.ms": "60000", "producer.override.linger.ms": "5"})
	for k, v := range map[string]string{
		"bootstrap.servers":            "127.0.0.1:9092",
		"listeners":                    "http://127.0.0.1:8083",
		"offset.storage.file.filename": "/tmp/o.dat",
		"offset.flush.interval.ms":     "60000",
		"producer.override.linger.ms":  "5",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Bootstrap: "127.0.0.1:9092", PG: PG{Port: 5432, DBName: "db"}}
	tests := []struct {
		name    string
		edit    func(*Options)
		wantErr string
	}{
		{name: "valid", edit: func(*Options) {}},
		{name: "no bootstrap", edit: func(o *Options) { o.Bootstrap = "" }, wantErr: "Bootstrap"},
		{name: "no port", edit: func(o *Options) { o.PG.Port = 0 }, wantErr: "PG.Port"},
		{name: "no database", edit: func(o *Options) { o.PG.DBName = "" }, wantErr: "PG.DBName"},
		{name: "owned worker key", edit: func(o *Options) { o.Worker = map[string]string{"listeners": "http://x:1"} }, wantErr: "listeners is set by debeziumtest"},
		{name: "bad key", edit: func(o *Options) { o.Connector = map[string]string{"a b": "1"} }, wantErr: "invalid property name"},
		{name: "newline in value", edit: func(o *Options) { o.Connector = map[string]string{"a": "1\nb=2"} }, wantErr: "newline"},
		{name: "name through Connector", edit: func(o *Options) { o.Connector = map[string]string{"name": "other"} }, wantErr: "Options.Name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.edit(&o)
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}
