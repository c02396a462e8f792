// Package schemareg encodes outbox payloads in the formats governed by a
// schema registry: Avro, Protobuf and JSON Schema in Confluent's wire format
// (magic byte 0, the schema id as a 4-byte big-endian integer, for Protobuf
// the message-index list, then the body), against any registry speaking the
// Confluent REST API.
//
// It works in the registered-contract mode: the schema is already in the
// registry, under the subject that a SubjectStrategy names for the record's
// topic (TopicNameStrategy "<topic>-value" by default), at its latest version
// or a pinned version or id. Each JSON payload is checked against the schema
// and encoded; a payload that does not fit is a *PayloadError naming the field
// path and what is wrong (a string where a long is, a missing required field,
// an unknown enum symbol, an int out of range). Nothing is coerced.
//
// In the inferred mode (Config.Source Inferred, Avro values only) the schema
// is derived from each payload instead, by the rules of Debezium's outbox
// EventRouter with table.expand.json.payload=true and Apicurio's
// AvroConverter (infer.go states them), registered under "<topic>-value"
// once per distinct schema while it is cached, and the record encoded as
// Java's Avro writes it: the e2e comparison with real Debezium finds the
// bodies and the schema texts equal byte for byte. A payload Debezium's
// expansion fails on is a *PayloadError naming the path and why.
//
// The registry is asked once per subject: the resolved schema, compiled, is
// kept in a bounded LRU cache (Config.CacheSize), so steady state makes no
// registry request per event, and a registry that is down changes nothing
// while the cache covers the traffic. Registry faults are classified: an
// unreachable registry, a timeout, 5xx and 429 are retried with exponential
// backoff and, when the retry budget is spent, returned wrapping
// ErrRegistryUnavailable; 401/403, an unknown or deleted subject or version,
// and a schema of another type are returned at once wrapping
// ErrRegistryRefused, naming the subject, the version and the fix.
//
// The Avro, Protobuf and JSON Schema codecs are the libraries'
// (github.com/hamba/avro/v2, google.golang.org/protobuf with
// github.com/bufbuild/protocompile, github.com/santhosh-tekuri/jsonschema/v6);
// this package only checks the JSON value against the schema on the way in,
// so that nothing the libraries would convert silently reaches them.
package schemareg
