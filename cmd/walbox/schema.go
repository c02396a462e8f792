package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
)

// withValueEncoder sets rc.Values to the schema registry encoder when
// --value-format asks for one (package schemareg), its metrics on reg.
func withValueEncoder(cfg config.Config, rc router.Config, reg prometheus.Registerer) (router.Config, error) {
	if !cfg.UsesSchemaRegistry() {
		return rc, nil
	}
	cl, err := schemareg.NewClient(cfg.SchemaRegistry)
	if err != nil {
		return rc, err
	}
	enc, err := schemareg.NewEncoder(cfg.ValueEncoderConfig(), cl, reg)
	if err != nil {
		return rc, err
	}
	rc.Values = enc
	return rc, nil
}
