package debezium

import (
	"errors"
	"strings"
	"testing"
)

// TestTranslateKeysWithAnEffect: keys that used to be warned about as
// having "no effect on the records" although they have one, and common
// settings that used to be refused although walbox can honour them.
//   - slot.stream.params origin=none filters changes replicated from
//     another server: walbox re-emitted them; now --pg-origin none.
//   - topic.delimiter names the record schemas (the envelope's "Value"
//     schema): now eventrouter.TopicDelimiter; a topic.naming.strategy
//     other than the default is refused, naming it.
//   - heartbeat.interval.ms: now --heartbeat-interval, with a warning that
//     walbox writes no heartbeat records.
//   - StringConverter with schemas.enable and errors.max.retries were
//     refused as unknown; now accepted, saying what walbox does.
func TestTranslateKeysWithAnEffect(t *testing.T) {
	tr, err := translate(t, base+
		"slot.stream.params=origin=none\n"+
		"topic.naming.strategy=io.debezium.schema.SchemaTopicNamingStrategy\n"+
		"topic.delimiter=_\n"+
		"heartbeat.interval.ms=30000\n"+
		"errors.max.retries=5\n"+
		"value.converter.schemas.enable=false\n"+
		"key.converter.schemas.enable=true\n", "")
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"pg-origin": "none", "heartbeat-interval": "30s"} {
		if got, ok := tr.Option(flag); !ok || got != want {
			t.Errorf("--%s = %q (set %v), want %q", flag, got, ok, want)
		}
	}
	if tr.Router.TopicDelimiter != "_" {
		t.Errorf("eventrouter.TopicDelimiter = %q, want _", tr.Router.TopicDelimiter)
	}
	warned := map[string]string{}
	for _, w := range tr.Warnings {
		warned[w.Key] = w.Why
	}
	for key, say := range map[string]string{
		"heartbeat.interval.ms":          "no heartbeat records",
		"errors.max.retries":             "without limit",
		"value.converter.schemas.enable": "ignores it",
	} {
		if !strings.Contains(warned[key], say) {
			t.Errorf("warning for %s = %q, want it to say %q", key, warned[key], say)
		}
	}
	for _, key := range []string{"slot.stream.params", "topic.delimiter", "topic.naming.strategy"} {
		if why, ok := warned[key]; ok {
			t.Errorf("%s warned about (%q); it has an effect and is applied", key, why)
		}
	}

	// Defaults map to nothing.
	tr, err = translate(t, base+"heartbeat.interval.ms=0\nerrors.max.retries=-1\nslot.stream.params=\n", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"pg-origin", "heartbeat-interval"} {
		if v, ok := tr.Option(flag); ok {
			t.Errorf("a default sets --%s=%s", flag, v)
		}
	}

	// What walbox cannot honour is refused, naming it.
	for _, c := range []struct{ line, key, say string }{
		{"slot.stream.params=origin=none;add-tables=public.x\n", "slot.stream.params", `"add-tables=public.x"`},
		{"topic.naming.strategy=io.debezium.schema.DefaultTopicNamingStrategy\n", "topic.naming.strategy", "io.debezium.schema.DefaultTopicNamingStrategy"},
		{"heartbeat.interval.ms=soon\n", "heartbeat.interval.ms", "milliseconds"},
		{"errors.max.retries=-2\n", "errors.max.retries", "retries"},
		{"value.converter.schemas.enable=maybe\n", "value.converter.schemas.enable", "boolean"},
	} {
		_, err := translate(t, base+c.line, "")
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: err = %v, want *UnsupportedError", strings.TrimSpace(c.line), err)
			continue
		}
		found := false
		for _, p := range ue.Problems {
			if p.Key == c.key && strings.Contains(p.Why+p.Fix, c.say) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: problems %+v, want one for %s saying %q", strings.TrimSpace(c.line), ue.Problems, c.key, c.say)
		}
	}
}

// TestTranslateIAMOptions: the AWS MSK IAM login module's role and
// profile options used to be dropped silently, so walbox signed with the
// environment's credentials instead of the role's. Now they are refused by
// name; awsDebugCreds, which only logs, is accepted.
func TestTranslateIAMOptions(t *testing.T) {
	const kafka = "bootstrap.servers=b:9092\nproducer.security.protocol=SASL_SSL\nproducer.sasl.mechanism=AWS_MSK_IAM\n"
	_, err := translate(t, base, kafka+`producer.sasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required awsDebugCreds=true;`+"\n")
	if err != nil {
		t.Fatalf("IAM login module with awsDebugCreds: %v", err)
	}
	_, err = translate(t, base, kafka+`producer.sasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required awsRoleArn="arn:aws:iam::1:role/x" awsProfileName="p";`+"\n")
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatalf("IAM login module with awsRoleArn: err = %v, want *UnsupportedError", err)
	}
	msg := err.Error()
	for _, s := range []string{"awsProfileName, awsRoleArn", "AWS_ACCESS_KEY_ID"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error lacks %q:\n%s", s, msg)
		}
	}
	if strings.Contains(msg, "role/x") {
		t.Errorf("error shows the JAAS value:\n%s", msg)
	}
}
