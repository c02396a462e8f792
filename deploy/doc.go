// Package deploy holds what walbox ships for running it in production:
// Prometheus alert rules (prometheus/alerts.yaml, with promtool unit tests
// in prometheus/alerts_test.yaml) and a Grafana dashboard
// (grafana/walbox.json). It has no code; its tests check those files.
package deploy
