// Package e2e runs the built walbox binary against a throwaway Postgres and a
// Kafka-protocol broker, kills it, restarts it, and checks with an
// independent consumer that nothing was lost and per-aggregate order held.
// Everything lives in _test.go files; this file only names the package.
package e2e
