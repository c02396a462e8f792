package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/certtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/kafkasec"
)

const kafkaSecret = "walbox-Sasl-Secret-5c8e"

// secureKfake is a kfake cluster that accepts only TLS connections with a
// certificate signed by ca and SCRAM-SHA-512 user walbox/kafkaSecret.
func secureKfake(t *testing.T, ca *certtest.CA) []string {
	t.Helper()
	srv := ca.Server(t, "127.0.0.1", "localhost")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser(kafkasec.MechanismScramSHA512, "walbox", kafkaSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// securedConsumer collects the event ids of records on topic, connecting
// with sec; it stops with the test.
type securedConsumer struct {
	mu  sync.Mutex
	ids map[string]bool
}

func consumeSecured(t *testing.T, brokers []string, sec kafkasec.Config, topic string) *securedConsumer {
	t.Helper()
	opts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.AllowAutoTopicCreation(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &securedConsumer{ids: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "event_id" {
						c.mu.Lock()
						c.ids[string(h.Value)] = true
						c.mu.Unlock()
					}
				}
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return c
}

func (c *securedConsumer) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id]
}

// TestKafkaSecurityKfake runs the walbox binary against a kfake cluster
// with TLS and SCRAM-SHA-512: with the right CA and password (from a file)
// it delivers; with an untrusted broker certificate it stops with one line
// naming --kafka-tls-ca-file. No output of either run holds the password,
// although the failing run is given it on the command line.
func TestKafkaSecurityKfake(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ca := certtest.NewCA(t, "kafka")
	brokers := secureKfake(t, ca)
	pg := pgtest.Start(t)
	e := newBiEnv(ctx, t, pg, brokers)
	e.exec(t, badInputOutboxDDL)
	e.ensureSlot(t)
	passFile := filepath.Join(t.TempDir(), "kafka-password")
	if err := os.WriteFile(passFile, []byte(kafkaSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec := kafkasec.Config{TLSCAFile: ca.CertFile, SASLMechanism: kafkasec.MechanismScramSHA512, SASLUsername: "walbox", SASLPasswordFile: passFile}
	secEnv := []string{
		"WALBOX_KAFKA_TLS_CA_FILE=" + ca.CertFile,
		"WALBOX_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"WALBOX_KAFKA_SASL_USERNAME=walbox",
		"WALBOX_KAFKA_SASL_PASSWORD_FILE=" + passFile,
	}
	col := consumeSecured(t, brokers, sec, e.prefix+".order")

	id := e.insert(t, validRow("ord-1"))
	p := startWalboxSplit(t, append(e.walboxEnv(), secEnv...))
	waitUntil(ctx, t, 60*time.Second, "the row to be delivered through TLS and SCRAM-SHA-512", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v\n%s", p.err, p.stderr.Tail(4000))
		}
		return col.has(id)
	})
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if out := p.stderr.String() + p.stdout.String(); strings.Contains(out, kafkaSecret) {
		t.Errorf("the succeeding run shows the password:\n%s", out)
	}

	// --kafka-tls-insecure-skip-verify accepts the certificate of a CA
	// walbox was not given, with a WARN at start.
	other := certtest.NewCA(t, "other")
	id2 := e.insert(t, validRow("ord-2"))
	p = startWalboxSplit(t, append(e.walboxEnv(), "WALBOX_KAFKA_TLS_CA_FILE="+other.CertFile, "WALBOX_KAFKA_TLS_INSECURE_SKIP_VERIFY=true",
		"WALBOX_KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "WALBOX_KAFKA_SASL_USERNAME=walbox", "WALBOX_KAFKA_SASL_PASSWORD="+kafkaSecret))
	waitUntil(ctx, t, 60*time.Second, "delivery with --kafka-tls-insecure-skip-verify", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v\n%s", p.err, p.stderr.Tail(4000))
		}
		return col.has(id2)
	})
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if !hasLogLine(p.stderr.String(), "WARN", "INSECURE", "--kafka-tls-insecure-skip-verify") {
		t.Errorf("no WARN line about --kafka-tls-insecure-skip-verify:\n%s", p.stderr.Tail(3000))
	}
	if strings.Contains(p.stderr.String()+p.stdout.String(), kafkaSecret) {
		t.Errorf("a run given the password in WALBOX_KAFKA_SASL_PASSWORD shows it:\n%s", p.stderr.String())
	}

	// --help, with the password in the environment, shows no secret.
	help := runWalboxToExit(t, []string{"WALBOX_KAFKA_SASL_PASSWORD=" + kafkaSecret}, []string{"--help"}, 30*time.Second)
	if !strings.Contains(help.stdout+help.stderr, "--kafka-sasl-password") || strings.Contains(help.stdout+help.stderr, kafkaSecret) {
		t.Errorf("walbox run --help: want the option listed and no secret; got exit %d:\n%s%s", help.code, help.stdout, help.stderr)
	}

	start := time.Now()
	res := runWalboxToExit(t, append(e.walboxEnv(), "WALBOX_KAFKA_TLS_CA_FILE="+other.CertFile, "WALBOX_KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "WALBOX_KAFKA_SASL_USERNAME=walbox"),
		[]string{"--kafka-sasl-password", kafkaSecret}, 60*time.Second)
	reason := checkFatal(t, res, 1, []string{"not signed by a trusted CA", "--kafka-tls-ca-file"}, []string{kafkaSecret})
	t.Logf("untrusted certificate: exit %d after %s: walbox: %s", res.code, time.Since(start).Round(time.Millisecond), reason)
}
