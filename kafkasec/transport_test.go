package kafkasec

import (
	"strings"
	"testing"
)

// SASL PLAIN sends the password, OAUTHBEARER the token, as they are: over
// a plaintext connection anyone on the path reads them. walbox said
// nothing.
func TestTransportWarning(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want string // "" for no warning
	}{
		{"plaintext, no SASL", Config{}, ""},
		{"PLAIN without TLS", Config{SASLMechanism: MechanismPlain}, "PLAIN"},
		{"OAUTHBEARER without TLS", Config{SASLMechanism: MechanismOAuthBearer}, "OAUTHBEARER"},
		{"PLAIN over TLS", Config{SASLMechanism: MechanismPlain, TLS: true}, ""},
		{"PLAIN, TLS by CA file", Config{SASLMechanism: MechanismPlain, TLSCAFile: "/ca.pem"}, ""},
		{"SCRAM without TLS", Config{SASLMechanism: MechanismScramSHA512}, ""},
	}
	for _, tt := range tests {
		got := tt.c.TransportWarning()
		if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want one naming %q", tt.name, got, tt.want)
		}
		if got != "" && !strings.Contains(got, "--kafka-tls") {
			t.Errorf("%s: %q does not say what to set", tt.name, got)
		}
	}
}
