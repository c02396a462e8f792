// Package deploy holds what walbox ships for running it in production:
// Prometheus alert rules (prometheus/alerts.yaml, with promtool unit tests
// in prometheus/alerts_test.yaml), a Grafana dashboard (grafana/walbox.json),
// the image build (image/build.sh for the repository's Dockerfile) and a
// Helm chart (helm/walbox). It has no code; its tests check those files.
package deploy
