// Package kafkasec turns walbox's Kafka security settings (TLS and SASL)
// into franz-go client options, so that every Kafka client walbox builds
// (the producer, the broker-limit lookup, replay) connects the same way.
//
// Secrets (the SASL password, an OAUTHBEARER token, AWS keys) are read when
// a connection authenticates, not when the client is built: a password file
// or token file that is rotated is picked up by the next connection. No
// secret ever appears in an error this package returns.
package kafkasec
