package pipeline

// ProduceHint says what to do about a record Kafka refused (err from a
// produce promise), for commands that produce outside a Relay, such as
// walbox replay --from-table.
func ProduceHint(err error) string { return produceHint(err) }
