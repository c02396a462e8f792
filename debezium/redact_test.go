package debezium

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Schema Registry credentials reach a Debezium configuration as
// *.basic.auth.user.info (USER:PASSWORD) or inside the registry's URL;
// walbox printed both in clear in config check and in its errors.
func TestRedactRegistryCredentials(t *testing.T) {
	tests := []struct{ key, value, want string }{
		{"value.converter.basic.auth.user.info", "svc:hunter2", "xxxxx"},
		{"key.converter.schema.registry.basic.auth.user.info", "svc:hunter2", "xxxxx"},
		{"value.converter.schema.registry.url", "https://svc:hunter2@registry:8081", "https://xxxxx@registry:8081"},
		{"value.converter.schema.registry.url", "http://a:hunter2@r1:8081,https://b:hunter2@r2:8081/x", "http://xxxxx@r1:8081,https://xxxxx@r2:8081/x"},
		{"value.converter.schema.registry.url", "https://tokenhunter2@registry", "https://xxxxx@registry"},
		{"value.converter.schema.registry.url", "https://registry:8081", "https://registry:8081"},
		{"topic.prefix", "app", "app"},
	}
	for _, tt := range tests {
		if got := redact(tt.key, tt.value); got != tt.want {
			t.Errorf("redact(%s, %s) = %s, want %s", tt.key, tt.value, got, tt.want)
		}
	}

	// Through a translation: neither the mappings, nor the warnings, nor
	// the error show them.
	tr, err := translate(t, base+`value.converter.basic.auth.user.info=svc:hunter2
value.converter.basic.auth.credentials.source=USER_INFO
value.converter.schema.registry.url=https://svc:hunter2@registry:8081
key.converter.schema.registry.url=https://svc:hunter2@registry:8081
`, "")
	var shown strings.Builder
	if tr != nil {
		for _, m := range tr.Mappings {
			fmt.Fprintf(&shown, "%+v\n", m)
		}
		for _, w := range tr.Warnings {
			fmt.Fprintf(&shown, "%s\n", w)
		}
	}
	if err != nil {
		shown.WriteString(err.Error())
	}
	if strings.Contains(shown.String(), "hunter2") {
		t.Errorf("a registry credential is shown:\n%s", shown.String())
	}
	if !strings.Contains(shown.String(), "basic.auth.user.info") {
		t.Errorf("the key is not listed:\n%s", shown.String())
	}
}

// A syntax error in a value must not echo part of it: it showed the four
// characters after a malformed \u of database.password.
func TestPropertiesSyntaxErrorHidesValue(t *testing.T) {
	for _, in := range []string{
		"database.password=ab\\uZ7x9cd\n",
		"database.password=ab\\u7x\n",
	} {
		_, err := ParseProperties("c.properties", []byte(in))
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "database.password") || !strings.Contains(err.Error(), "c.properties:1") {
			t.Errorf("%q: err = %v, want a syntax error naming the key and line", in, err)
		}
		if err != nil && (strings.Contains(err.Error(), "Z7x9") || strings.Contains(err.Error(), "7x")) {
			t.Errorf("%q: err = %v shows part of the value", in, err)
		}
	}
	// JSON: encoding/json quotes the character it found.
	_, err := ParseJSON("c.json", []byte(`{"database.password": hunter2}`))
	if !errors.Is(err, ErrSyntax) || strings.Contains(err.Error(), "'h'") {
		t.Errorf("json: err = %v", err)
	}
	// A key is no secret: its error may show it.
	if _, err := ParseProperties("c.properties", []byte("a\\uZZ=1\n")); err == nil || !strings.Contains(err.Error(), "key") {
		t.Errorf("key: %v", err)
	}
}
