package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
)

// withValueEncoder sets rc.Values and rc.Keys to the schema registry
// encoders that --value-format and --key-format ask for (package
// schemareg), their metrics on reg.
func withValueEncoder(cfg config.Config, rc router.Config, reg prometheus.Registerer) (router.Config, error) {
	if !cfg.UsesSchemaRegistry() {
		return rc, nil
	}
	cl, err := schemareg.NewClient(cfg.SchemaRegistry)
	if err != nil {
		return rc, err
	}
	if cfg.ValueFormat != config.ValueFormatJSON {
		enc, err := schemareg.NewEncoder(cfg.ValueEncoderConfig(), cl, reg)
		if err != nil {
			return rc, err
		}
		rc.Values = enc
	}
	if cfg.EncodesKeys() {
		enc, err := schemareg.NewKeyEncoder(cfg.KeyEncoderConfig(), cl, reg)
		if err != nil {
			return rc, err
		}
		rc.Keys = enc
	}
	return rc, nil
}

// encoderStates returns rc's encoders that report the registry's state.
func encoderStates(rc router.Config) []registryState {
	var out []registryState
	for _, enc := range []router.ValueEncoder{rc.Values, rc.Keys} {
		switch e := enc.(type) {
		case *schemareg.Encoder:
			out = append(out, e)
		case schemareg.KeyEncoder:
			out = append(out, e.Encoder)
		}
	}
	return out
}
