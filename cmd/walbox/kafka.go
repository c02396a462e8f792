package main

import (
	"log/slog"
	"os"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
)

// kafkaConfig returns the Kafka client settings every command shares (TLS
// and SASL included) and warns loudly when broker certificates are not
// verified.
func kafkaConfig(cfg config.Config, log *slog.Logger) (pipeline.KafkaConfig, error) {
	kc, err := cfg.KafkaConfig()
	if err != nil {
		return pipeline.KafkaConfig{}, err
	}
	if cfg.KafkaSecurity.TLSInsecureSkipVerify {
		log.Warn("INSECURE: --kafka-tls-insecure-skip-verify is set: broker certificates are not verified, " +
			"so anyone on the network path can impersonate the brokers and read or alter events; " +
			"give --kafka-tls-ca-file instead and remove --kafka-tls-insecure-skip-verify")
	}
	return kc, nil
}

// warnTransport logs at start, as warnings, the connections an attacker on
// the network path could read or redirect (config.TransportWarnings): a
// Postgres sslmode that allows plaintext, an explicit DSN dropping the
// Debezium configuration's verify-full, SASL PLAIN or OAUTHBEARER without
// TLS. dbz is nil outside Debezium mode.
func warnTransport(cfg config.Config, dbz *debeziumMode, log *slog.Logger) {
	var dbzDSN string
	if dbz != nil {
		for _, o := range dbz.tr.Options {
			if o.Flag == "pg-dsn" {
				dbzDSN = o.Value
			}
		}
	}
	for _, w := range cfg.TransportWarnings(os.Getenv, dbzDSN) {
		log.Warn("INSECURE transport: " + w)
	}
}
