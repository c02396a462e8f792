package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string // substring; "" means valid
	}{
		{name: "zero value", opts: Options{}},
		{name: "everything set", opts: Options{
			AutoCreateTopics: Bool(false), Partitions: 1, MessageMaxBytes: 4 << 20,
			ExtraProperties: map[string]string{"log.retention.ms": "1000", "ssl.keystore.location": `C:\x`},
		}},
		{name: "negative partitions", opts: Options{Partitions: -1}, wantErr: "Partitions"},
		{name: "negative message size", opts: Options{MessageMaxBytes: -1}, wantErr: "MessageMaxBytes"},
		{name: "owned property", opts: Options{ExtraProperties: map[string]string{"listeners": "PLAINTEXT://:9092"}}, wantErr: "set by kafkatest"},
		{name: "owned data dir", opts: Options{ExtraProperties: map[string]string{"log.dirs": "/tmp/x"}}, wantErr: "set by kafkatest"},
		{name: "key with equals", opts: Options{ExtraProperties: map[string]string{"a=b": "c"}}, wantErr: "invalid property name"},
		{name: "key with space", opts: Options{ExtraProperties: map[string]string{"a b": "c"}}, wantErr: "invalid property name"},
		{name: "empty key", opts: Options{ExtraProperties: map[string]string{"": "c"}}, wantErr: "invalid property name"},
		// A newline would smuggle in a second property, e.g. a listener.
		{name: "value with newline", opts: Options{ExtraProperties: map[string]string{"a": "1\nlisteners=x"}}, wantErr: "newline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestServerProperties(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want map[string]string // a subset of the result
	}{
		{
			name: "defaults",
			opts: Options{},
			want: map[string]string{
				"process.roles":                            "broker,controller",
				"listeners":                                "PLAINTEXT://127.0.0.1:9100,CONTROLLER://127.0.0.1:9101",
				"advertised.listeners":                     "PLAINTEXT://127.0.0.1:9100",
				"controller.quorum.voters":                 "1@127.0.0.1:9101",
				"log.dirs":                                 "/data",
				"auto.create.topics.enable":                "true",
				"num.partitions":                           "3",
				"offsets.topic.replication.factor":         "1",
				"transaction.state.log.replication.factor": "1",
				"transaction.state.log.min.isr":            "1",
				"group.initial.rebalance.delay.ms":         "0",
			},
		},
		{
			name: "options",
			opts: Options{AutoCreateTopics: Bool(false), Partitions: 7, MessageMaxBytes: 5 << 20,
				ExtraProperties: map[string]string{"num.io.threads": "8", "log.retention.ms": "60000"}},
			want: map[string]string{
				"auto.create.topics.enable": "false",
				"num.partitions":            "7",
				"message.max.bytes":         "5242880",
				"num.io.threads":            "8", // overrides the default
				"log.retention.ms":          "60000",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.opts.serverProperties(9100, 9101, "/data")
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if _, ok := got["message.max.bytes"]; ok && tt.opts.MessageMaxBytes == 0 {
				t.Errorf("message.max.bytes set although MessageMaxBytes is 0")
			}
		})
	}
}

func TestRenderProperties(t *testing.T) {
	got := renderProperties(map[string]string{"b": `C:\dir`, "a": "1"})
	want := "# Written by walbox internal/kafkatest.\na=1\nb=C:\\\\dir\n"
	if got != want {
		t.Errorf("renderProperties = %q, want %q", got, want)
	}
}

func TestPomVersion(t *testing.T) {
	if got := pomVersion([]byte("<properties>\n  <kafka.version> 4.3.1 </kafka.version>")); got != "4.3.1" {
		t.Errorf("pomVersion = %q, want 4.3.1", got)
	}
	if got := pomVersion([]byte("<project/>")); got != "unknown" {
		t.Errorf("pomVersion without the property = %q, want unknown", got)
	}
}

// TestClasspathCache checks that a cached classpath needs no mvn, and that
// editing the pom invalidates the cache.
func TestClasspathCache(t *testing.T) {
	fulltest.Require(t, "the broker classpath resolved by mvn into an empty cache")
	if _, err := exec.LookPath("mvn"); err != nil {
		skipOrFatal(t, fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	pom, err := findPom(Options{})
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	ctx := context.Background()

	first, err := resolveClasspath(ctx, Options{Pom: pom}, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !first.fromMvn {
		t.Error("first resolution in an empty cache did not run mvn")
	}
	if !strings.Contains(first.String(), "kafka_2.13-"+first.version+".jar") {
		t.Errorf("classpath lacks kafka_2.13-%s.jar: %s", first.version, first)
	}
	if _, err := os.Stat(filepath.Join(cache, "kafka-"+first.version+".classpath")); err != nil {
		t.Errorf("no cache file: %v", err)
	}

	noMvn := filepath.Join(t.TempDir(), "mvn-must-not-run")
	second, err := resolveClasspath(ctx, Options{Pom: pom, Maven: noMvn}, cache)
	if err != nil {
		t.Fatalf("cached resolution ran mvn: %v", err)
	}
	if second.fromMvn || second.String() != first.String() {
		t.Errorf("cached resolution = %+v, want %+v from the cache", second, first)
	}

	// A different pom (same version, so the same cache file) must not be
	// served from the cache.
	data, err := os.ReadFile(pom)
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), "pom.xml")
	if err := os.WriteFile(edited, append(data, "<!-- edited -->\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveClasspath(ctx, Options{Pom: edited, Maven: noMvn}, cache); !errors.Is(err, ErrUnavailable) {
		t.Errorf("edited pom: err = %v, want ErrUnavailable from the missing mvn", err)
	}
}
