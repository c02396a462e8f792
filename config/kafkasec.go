package config

import (
	"strings"

	"github.com/walbox/walbox/kafkasec"
	"github.com/walbox/walbox/pipeline"
)

// Checks and value kinds of the Kafka security options (options.go). The
// checks report each problem under the option that causes it; the texts
// come from package kafkasec, which never includes a secret.

func checkKafkaTLSCA(c *Config) error {
	if c.KafkaSecurity.TLSCAFile == "" {
		return nil
	}
	if _, err := kafkasec.LoadCA(c.KafkaSecurity.TLSCAFile); err != nil {
		return badf("%v", err)
	}
	return nil
}

func checkKafkaTLSCert(c *Config) error {
	s := c.KafkaSecurity
	switch {
	case s.TLSCertFile == "":
		return nil
	case s.TLSKeyFile == "":
		return badf("mutual TLS needs the key too; set --kafka-tls-key-file (WALBOX_KAFKA_TLS_KEY_FILE)")
	}
	if _, err := kafkasec.LoadKeyPair(s.TLSCertFile, s.TLSKeyFile); err != nil {
		return badf("%v", err)
	}
	return nil
}

func checkKafkaTLSKey(c *Config) error {
	if c.KafkaSecurity.TLSKeyFile != "" && c.KafkaSecurity.TLSCertFile == "" {
		return badf("mutual TLS needs the certificate too; set --kafka-tls-cert-file (WALBOX_KAFKA_TLS_CERT_FILE)")
	}
	return nil // the pair is loaded by checkKafkaTLSCert
}

func checkKafkaSASL(c *Config) error {
	if err := c.KafkaSecurity.CheckSASL(); err != nil {
		return badf("%v", err)
	}
	return nil
}

func checkSecretFile(path string) error {
	if path == "" {
		return nil
	}
	if _, err := kafkasec.ReadSecretFile(path); err != nil {
		return badf("%v", err)
	}
	return nil
}

// redactSecret masks a secret for errors and logs; "" stays "" (unset).
func redactSecret(s string) string {
	if s == "" {
		return ""
	}
	return redactMask
}

// secretValue is a string option holding a secret: get, which Usage and
// errors show, never returns it.
func secretValue(field func(*Config) *string) value {
	v := stringValue("SECRET", field)
	v.get = func(c *Config) string { return redactSecret(*field(c)) }
	v.raw = func(c *Config) string { return *field(c) }
	return v
}

// upperValue is a string stored in upper case (SASL mechanism names).
func upperValue(arg string, field func(*Config) *string) value {
	v := stringValue(arg, field)
	v.set = func(c *Config, s string) error { *field(c) = strings.ToUpper(strings.TrimSpace(s)); return nil }
	return v
}

// KafkaConfig returns the Kafka client settings shared by every command
// that connects to Kafka: brokers, client id, linger, batch size, TLS and
// SASL. Callers add what is their own (buffering, topic limits). It fails
// when a TLS file or secret file cannot be used; call it on a validated
// Config.
func (c Config) KafkaConfig() (pipeline.KafkaConfig, error) {
	tc, err := c.KafkaSecurity.TLSConfig()
	if err != nil {
		return pipeline.KafkaConfig{}, err
	}
	mech, err := c.KafkaSecurity.Mechanism()
	if err != nil {
		return pipeline.KafkaConfig{}, err
	}
	return pipeline.KafkaConfig{
		Brokers:       c.KafkaBrokers,
		ClientID:      c.ClientID,
		Linger:        c.ProducerLinger,
		BatchMaxBytes: c.ProducerBatchMaxBytes,
		TLS:           tc,
		SASL:          mech,
	}, nil
}
