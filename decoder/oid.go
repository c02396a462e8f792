package decoder

// Type OIDs of the built-in types an outbox table typically uses, as found in
// Column.TypeOID. They are fixed in pg_type.dat and identical on every
// Postgres installation, so a router can compare against them without a
// catalog lookup. Domains and custom types have installation-specific OIDs
// and are not listed.
const (
	ByteaOID       = 17   // bytea: text form decoded by DecodeBytea
	Int8OID        = 20   // bigint
	Int4OID        = 23   // integer
	TextOID        = 25   // text
	JSONOID        = 114  // json: text form is the document as written
	VarcharOID     = 1043 // character varying
	TimestamptzOID = 1184 // timestamp with time zone
	UUIDOID        = 2950 // uuid
	JSONBOID       = 3802 // jsonb: text form is the normalised document
)
