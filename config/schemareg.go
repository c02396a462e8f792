package config

import (
	"strings"
	"time"

	"github.com/walbox/walbox/kafkasec"
	"github.com/walbox/walbox/schemareg"
)

// Options and checks of the record value's format (options.go, group
// "Schema registry"). The formats, strategies and what the registry client
// needs are package schemareg's; these checks report each problem under the
// option that causes it.

// ValueFormatJSON is the default value format: the payload as it is.
const ValueFormatJSON = "json"

// valueFormats are the accepted values of --value-format.
var valueFormats = append(append([]string{ValueFormatJSON}, schemareg.Formats...), string(schemareg.FormatPreEncoded))

// ValueSchema selects the registered schema of the values; the fields are
// schemareg.Config's, whose documentation states what each does.
type ValueSchema struct {
	// Strategy is "topic" (default), "record" or "topic-record".
	Strategy string
	// RecordName is the record's fully-qualified name for the record
	// strategies. Default "".
	RecordName string
	// Version pins the subject's version, ID the schema id; 0 (default)
	// uses the latest version.
	Version, ID int
	// ProtobufMessage names the message of a protobuf schema; "" is the
	// first.
	ProtobufMessage string
	// CacheSize bounds the subjects kept compiled. Default
	// schemareg.DefaultCacheSize.
	CacheSize int
	// Source is "registered" (default) or "inferred".
	Source string
	// LatestTTL reads the latest version again after this; 0 (default)
	// reads it once per subject.
	LatestTTL time.Duration
}

// KeyFormatText is the default key format: the aggregate id's text.
const KeyFormatText = "text"

// keyFormats are the accepted values of --key-format (protobuf is not one:
// a protobuf schema is a message, and the key is text).
var keyFormats = []string{KeyFormatText, string(schemareg.FormatAvro), string(schemareg.FormatJSONSchema)}

// UsesSchemaRegistry reports whether values or keys are encoded through
// the registry.
func (c Config) UsesSchemaRegistry() bool {
	return c.encodesValues() || c.EncodesKeys()
}

func (c Config) encodesValues() bool { return c.ValueFormat != "" && c.ValueFormat != ValueFormatJSON }

// EncodesKeys reports whether keys are encoded through the registry.
func (c Config) EncodesKeys() bool { return c.KeyFormat != "" && c.KeyFormat != KeyFormatText }

// KeyEncoderConfig returns the key encoder's settings (subject
// "<topic>-key", the latest version); call it on a validated Config that
// EncodesKeys.
func (c Config) KeyEncoderConfig() schemareg.Config {
	return schemareg.Config{Format: schemareg.Format(c.KeyFormat), Key: true, CacheSize: c.ValueSchema.CacheSize}
}

// ValueEncoderConfig returns the encoder's settings, Format from
// ValueFormat; call it on a validated Config that UsesSchemaRegistry.
func (c Config) ValueEncoderConfig() schemareg.Config {
	v := c.ValueSchema
	out := schemareg.Config{
		Format:          schemareg.Format(c.ValueFormat),
		Strategy:        schemareg.SubjectStrategy(v.Strategy),
		RecordName:      v.RecordName,
		Version:         v.Version,
		ID:              v.ID,
		ProtobufMessage: v.ProtobufMessage,
		CacheSize:       v.CacheSize,
		LatestTTL:       v.LatestTTL,
	}
	if v.Source == string(schemareg.Inferred) {
		out.Source = schemareg.Inferred
		out.PayloadColumn = c.Columns.Payload
	}
	return out
}

func checkValueFormat(c *Config) error {
	if err := checkEnum(c.ValueFormat, valueFormats...); err != nil {
		return err
	}
	if !c.encodesValues() {
		return nil
	}
	if v := c.ValueSchema; c.ValueFormat == string(schemareg.FormatPreEncoded) &&
		(v.Strategy != string(schemareg.TopicName) || v.RecordName != "" || v.Version != 0 || v.ID != 0 || v.ProtobufMessage != "") {
		return badf("pre-encoded payloads pass through with the schema id they carry; remove --value-subject-strategy, --value-record-name, --value-schema-version, --value-schema-id and --value-protobuf-message")
	}
	return checkFormatNeeds(c, c.ValueFormat)
}

func checkKeyFormat(c *Config) error {
	if err := checkEnum(c.KeyFormat, keyFormats...); err != nil {
		return err
	}
	if !c.EncodesKeys() {
		return nil
	}
	return checkFormatNeeds(c, c.KeyFormat)
}

// checkFormatNeeds checks what a registry format needs.
func checkFormatNeeds(c *Config, format string) error {
	if len(c.SchemaRegistry.URLs) == 0 {
		return badf("%s needs the registry; set --schema-registry-url (WALBOX_SCHEMA_REGISTRY_URL)", format)
	}
	return nil
}

// registryOnly refuses a registry option set while the value format is
// json, where it would do nothing.
func registryOnly(c *Config, set bool) error {
	if set && !c.UsesSchemaRegistry() {
		return badf("set, but --value-format is %q and --key-format %q, which use no registry; set --value-format to avro, protobuf or json-schema (or --key-format to avro or json-schema), or remove it", c.ValueFormat, c.KeyFormat)
	}
	return nil
}

func checkRegistryURLs(c *Config) error {
	if err := registryOnly(c, len(c.SchemaRegistry.URLs) > 0); err != nil {
		return err
	}
	if len(c.SchemaRegistry.URLs) == 0 {
		return nil
	}
	if err := (schemareg.ClientConfig{URLs: c.SchemaRegistry.URLs}).Validate(); err != nil {
		return badf("%s", strings.TrimPrefix(err.Error(), schemareg.ErrInvalidConfig.Error()+": "))
	}
	return nil
}

func checkRegistryUser(c *Config) error {
	r := c.SchemaRegistry
	if err := registryOnly(c, r.BasicAuthUser != ""); err != nil {
		return err
	}
	if r.BasicAuthUser != "" && r.BasicAuthPassword == "" && r.BasicAuthPasswordFile == "" {
		return badf("a user without a password; set --schema-registry-password-file (or --schema-registry-password)")
	}
	if r.BasicAuthUser != "" && (r.BearerToken != "" || r.BearerTokenFile != "") {
		return badf("basic authentication and a bearer token together; give one of them")
	}
	return nil
}

func checkRegistryPassword(c *Config) error {
	r := c.SchemaRegistry
	if err := registryOnly(c, r.BasicAuthPassword != ""); err != nil {
		return err
	}
	if r.BasicAuthPassword != "" && r.BasicAuthUser == "" {
		return badf("a password without a user; set --schema-registry-user")
	}
	return nil
}

func checkRegistryPasswordFile(c *Config) error {
	r := c.SchemaRegistry
	if err := registryOnly(c, r.BasicAuthPasswordFile != ""); err != nil {
		return err
	}
	if r.BasicAuthPasswordFile != "" && r.BasicAuthUser == "" {
		return badf("a password without a user; set --schema-registry-user")
	}
	return checkSecretFile(r.BasicAuthPasswordFile)
}

func checkRegistryToken(c *Config) error {
	return registryOnly(c, c.SchemaRegistry.BearerToken != "")
}

func checkRegistryTokenFile(c *Config) error {
	if err := registryOnly(c, c.SchemaRegistry.BearerTokenFile != ""); err != nil {
		return err
	}
	return checkSecretFile(c.SchemaRegistry.BearerTokenFile)
}

func checkRegistryTLSCA(c *Config) error {
	f := c.SchemaRegistry.TLSCAFile
	if err := registryOnly(c, f != ""); err != nil || f == "" {
		return err
	}
	if _, err := kafkasec.LoadCA(f); err != nil {
		return badf("%v", err)
	}
	return nil
}

func checkRegistryTLSCert(c *Config) error {
	r := c.SchemaRegistry
	if err := registryOnly(c, r.TLSCertFile != ""); err != nil || r.TLSCertFile == "" {
		return err
	}
	if r.TLSKeyFile == "" {
		return badf("mutual TLS needs the key too; set --schema-registry-tls-key-file (WALBOX_SCHEMA_REGISTRY_TLS_KEY_FILE)")
	}
	if _, err := kafkasec.LoadKeyPair(r.TLSCertFile, r.TLSKeyFile); err != nil {
		return badf("%v", err)
	}
	return nil
}

func checkRegistryTLSKey(c *Config) error {
	r := c.SchemaRegistry
	if err := registryOnly(c, r.TLSKeyFile != ""); err != nil {
		return err
	}
	if r.TLSKeyFile != "" && r.TLSCertFile == "" {
		return badf("mutual TLS needs the certificate too; set --schema-registry-tls-cert-file (WALBOX_SCHEMA_REGISTRY_TLS_CERT_FILE)")
	}
	return nil
}

func checkRegistryServerName(c *Config) error {
	return registryOnly(c, c.SchemaRegistry.TLSServerName != "")
}

func checkSubjectStrategy(c *Config) error {
	return checkEnum(c.ValueSchema.Strategy, schemareg.Strategies...)
}

func checkRecordName(c *Config) error {
	s := c.ValueSchema
	if err := registryOnly(c, s.RecordName != ""); err != nil {
		return err
	}
	if c.encodesValues() && s.Strategy != string(schemareg.TopicName) && s.RecordName == "" {
		return missingf("--value-subject-strategy %s names the subject after the record; set the record's fully-qualified name (e.g. shop.Order)", s.Strategy)
	}
	if s.RecordName != "" && s.Strategy == string(schemareg.TopicName) {
		return badf("set, but --value-subject-strategy is topic, which does not use it; set the strategy to record or topic-record, or remove it")
	}
	return nil
}

func checkSchemaVersion(c *Config) error {
	s := c.ValueSchema
	if err := registryOnly(c, s.Version != 0); err != nil {
		return err
	}
	if s.Version < 0 {
		return badf("expected a version number of 1 or more, or 0 for the latest version")
	}
	if s.Version > 0 && s.ID > 0 {
		return badf("set together with --value-schema-id; pin one of them")
	}
	return nil
}

func checkSchemaID(c *Config) error {
	s := c.ValueSchema
	if err := registryOnly(c, s.ID != 0); err != nil {
		return err
	}
	if s.ID < 0 {
		return badf("expected a schema id of 1 or more, or 0 to look the subject up")
	}
	return nil
}

func checkSchemaSource(c *Config) error {
	if err := checkEnum(c.ValueSchema.Source, schemareg.Sources...); err != nil {
		return err
	}
	if c.ValueSchema.Source != string(schemareg.Inferred) {
		return nil
	}
	if c.ValueFormat != string(schemareg.FormatAvro) {
		return badf("inferred schemas are Avro; set --value-format avro, or --value-schema-source registered")
	}
	if v := c.ValueSchema; v.Strategy != string(schemareg.TopicName) || v.RecordName != "" || v.Version != 0 || v.ID != 0 {
		return badf("an inferred schema is registered under <topic>-value and encodes the record it was inferred from; " +
			"remove --value-subject-strategy, --value-record-name, --value-schema-version and --value-schema-id")
	}
	return nil
}

func checkProtobufMessage(c *Config) error {
	m := c.ValueSchema.ProtobufMessage
	if m != "" && c.ValueFormat != string(schemareg.FormatProtobuf) {
		return badf("set, but --value-format is %q; it names the message of a protobuf schema", c.ValueFormat)
	}
	return nil
}

func checkLatestTTL(c *Config) error {
	s := c.ValueSchema
	if err := registryOnly(c, s.LatestTTL != 0); err != nil {
		return err
	}
	switch {
	case s.LatestTTL < 0:
		return badf("expected a positive duration, or 0 to read the latest version once")
	case s.LatestTTL > 0 && (s.Version > 0 || s.ID > 0):
		return badf("set with --value-schema-version or --value-schema-id, which pin the schema; remove one of them")
	case s.LatestTTL > 0 && !c.encodesValues():
		return badf("set, but --value-format is %q; it applies to the values' latest version", c.ValueFormat)
	case s.LatestTTL > 0 && c.ValueFormat == string(schemareg.FormatPreEncoded):
		return badf("pre-encoded payloads carry their schema id and read no latest version; remove it")
	}
	return nil
}

func checkCloudEventsSource(c *Config) error {
	s := c.CloudEventsSource
	if s != "" && (c.CloudEvents == "" || c.CloudEvents == "none") {
		return badf("set, but --cloudevents is none; set --cloudevents to binary or structured, or remove it")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == ' ' {
			return badf("a URI reference has no spaces or control characters")
		}
	}
	return nil
}
