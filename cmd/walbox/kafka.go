package main

import (
	"log/slog"

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
