package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/certtest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/kafkasec"
)

// TestKafkaSASLSSL runs the walbox binary against the real Kafka broker
// with a SASL_SSL listener (SCRAM-SHA-512, a server certificate made here
// with crypto/x509): walbox delivers through it with the password from a
// file; a wrong password and an untrusted certificate each stop walbox
// with one line naming the cause and the option to fix; no output of any
// run holds the password.
func TestKafkaSASLSSL(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ca := certtest.NewCA(t, "kafka")
	srv := ca.Server(t, "127.0.0.1", "localhost")
	broker := kafkatest.Start(t, kafkatest.WithSASLSSL(kafkatest.SASLSSL{
		CertFile: srv.CertFile, KeyFile: srv.KeyFile, User: "walbox", Password: kafkaSecret,
	}))
	brokers := broker.SASLSSLAddrs()
	if brokers == nil {
		kafkatest.SkipExternal(t, "the test needs a broker with a SASL_SSL listener of its own")
	}
	pg := pgtest.Start(t)
	e := newBiEnv(ctx, t, pg, brokers)
	e.exec(t, badInputOutboxDDL)
	e.ensureSlot(t)
	dir := t.TempDir()
	passFile := filepath.Join(dir, "kafka-password")
	if err := os.WriteFile(passFile, []byte(kafkaSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongFile := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(wrongFile, []byte("not-"+kafkaSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	secEnv := func(caFile, pass string) []string {
		return append(e.walboxEnv(),
			"WALBOX_KAFKA_TLS_CA_FILE="+caFile,
			"WALBOX_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
			"WALBOX_KAFKA_SASL_USERNAME=walbox",
			"WALBOX_KAFKA_SASL_PASSWORD_FILE="+pass)
	}
	sec := kafkasec.Config{TLSCAFile: ca.CertFile, SASLMechanism: kafkasec.MechanismScramSHA512, SASLUsername: "walbox", SASLPasswordFile: passFile}
	col := consumeSecured(t, brokers, sec, e.prefix+".order")

	ids := []string{e.insert(t, validRow("ord-1"))}
	p := startWalboxSplit(t, secEnv(ca.CertFile, passFile))
	ids = append(ids, e.insert(t, validRow("ord-2")))
	waitUntil(ctx, t, 90*time.Second, "both rows to be delivered through SASL_SSL", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v\n%s", p.err, p.stderr.Tail(4000))
		}
		return col.has(ids[0]) && col.has(ids[1])
	})
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	for _, out := range []string{p.stderr.String(), p.stdout.String()} {
		if strings.Contains(out, kafkaSecret) {
			t.Errorf("the succeeding run shows the password:\n%s", out)
		}
	}

	t.Run("wrong password", func(t *testing.T) {
		res := runWalboxToExit(t, secEnv(ca.CertFile, wrongFile), nil, 60*time.Second)
		reason := checkFatal(t, res, 1, []string{"SASL SCRAM-SHA-512 authentication of user \"walbox\" failed", "--kafka-sasl-password-file"}, []string{kafkaSecret})
		t.Logf("walbox: %s", reason)
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		other := certtest.NewCA(t, "other")
		res := runWalboxToExit(t, secEnv(other.CertFile, passFile), []string{"--kafka-sasl-password", kafkaSecret}, 60*time.Second)
		reason := checkFatal(t, res, 1, []string{"not signed by a trusted CA", "--kafka-tls-ca-file"}, []string{kafkaSecret})
		t.Logf("walbox: %s", reason)
	})
}
