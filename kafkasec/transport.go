package kafkasec

import "fmt"

// TransportWarning returns a sentence for the log at start when c sends a
// SASL secret in clear: PLAIN (the password) or OAUTHBEARER (the token)
// without TLS, so anyone on the network path reads it and can
// authenticate as walbox; "" otherwise. SCRAM never sends the password
// and AWS_MSK_IAM signs its requests, so they get none.
func (c Config) TransportWarning() string {
	if c.TLSEnabled() {
		return ""
	}
	switch c.SASLMechanism {
	case MechanismPlain, MechanismOAuthBearer:
		return fmt.Sprintf("SASL %s without TLS: the %s crosses the network in clear, so anyone on the path can read it and authenticate as walbox; "+
			"set --kafka-tls (and --kafka-tls-ca-file for a private CA) and use the brokers' TLS listener", c.SASLMechanism, secretName(c.SASLMechanism))
	}
	return ""
}

func secretName(mechanism string) string {
	if mechanism == MechanismOAuthBearer {
		return "token"
	}
	return "password"
}
