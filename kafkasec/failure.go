package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrAuth marks a connection the brokers or walbox refused for its
// credentials or certificates: retrying cannot fix it, so walbox stops.
var ErrAuth = errors.New("kafka refused the connection's security")

// AuthFailure returns, when err from a Kafka client is a TLS verification
// failure or a SASL authentication failure, a one-line error that names the
// cause and the options to fix, matching ErrAuth and err; otherwise nil
// (the brokers may be down for a while: the caller retries).
func (c Config) AuthFailure(err error) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknownCA) || (errors.As(err, &verify) && !errors.As(err, &hostname) && !errors.As(err, &invalid)):
		return c.authErr(err, "the brokers' TLS certificate is not signed by a trusted CA; give the CA that signs it with --kafka-tls-ca-file (WALBOX_KAFKA_TLS_CA_FILE)")
	case errors.As(err, &hostname):
		return c.authErr(err, "the brokers' TLS certificate does not carry the name walbox connects to; connect to a name it carries or set --kafka-tls-server-name (WALBOX_KAFKA_TLS_SERVER_NAME)")
	case errors.As(err, &invalid):
		return c.authErr(err, "the brokers' TLS certificate is not valid (expired or not for a server); renew it on the brokers")
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return c.authErr(err, fmt.Sprintf("SASL %s authentication of user %q failed; check --kafka-sasl-username and the password in --kafka-sasl-password-file or --kafka-sasl-password (WALBOX_KAFKA_SASL_…)",
			c.SASLMechanism, c.SASLUsername))
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return c.authErr(err, fmt.Sprintf("the brokers do not accept SASL mechanism %s; set --kafka-sasl-mechanism to one the listener enables", c.SASLMechanism))
	}
	return nil
}

type authError struct {
	msg   string
	cause error
}

func (e *authError) Error() string   { return e.msg }
func (e *authError) Unwrap() []error { return []error{ErrAuth, e.cause} }

func (c Config) authErr(cause error, hint string) error {
	return &authError{msg: fmt.Sprintf("kafka: %s (%v)", hint, cause), cause: cause}
}
