package debezium

import (
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// producer maps the Kafka producer settings: the worker's producer.* (and
// its bootstrap.servers), overridden by the connector's
// producer.override.*, as Kafka Connect builds its producer.
func (t *translator) producer() {
	type src struct {
		p      *Properties
		prefix string
	}
	srcs := []src{{t.worker, "producer."}, {t.conn, "producer.override."}}
	// bootstrap.servers of the worker is the producer's unless producer.* names others.
	if v, ok := t.get(t.worker, "bootstrap.servers"); ok {
		t.setOption("kafka-brokers", normalizeList(v), "bootstrap.servers")
		t.mapped(t.worker, "bootstrap.servers", "--kafka-brokers", "")
	}
	// settings collects the effective value of each producer key and
	// where it came from, the connector's override winning.
	type setting struct {
		p   *Properties
		key string
		v   string
	}
	eff := map[string]setting{}
	var order []string
	for _, s := range srcs {
		if s.p == nil {
			continue
		}
		for _, e := range s.p.Entries() {
			k, ok := strings.CutPrefix(e.Key, s.prefix)
			if !ok {
				continue
			}
			t.used[s.p][e.Key] = true
			if prev, seen := eff[k]; seen {
				t.mapped(prev.p, prev.key, "(overridden)", "by "+e.Key)
			} else {
				order = append(order, k)
			}
			eff[k] = setting{s.p, e.Key, strings.TrimSpace(e.Value)}
		}
	}
	sec := map[string]setting{}
	for _, k := range order {
		s := eff[k]
		switch {
		case k == "bootstrap.servers":
			t.setOption("kafka-brokers", normalizeList(s.v), s.key)
			t.mapped(s.p, s.key, "--kafka-brokers", "")
		case k == "acks":
			if s.v == "all" || s.v == "-1" {
				t.mapped(s.p, s.key, "(default)", "walbox always produces with acks=all")
			} else {
				t.warn(s.p, s.key, "walbox always produces with acks=all and the idempotent producer, which loses nothing where acks="+s.v+" could; the records are the same")
			}
		case k == "enable.idempotence":
			if s.v == "false" {
				t.warn(s.p, s.key, "walbox always uses the idempotent producer (no duplicates from producer retries); the records are the same")
			} else {
				t.mapped(s.p, s.key, "(default)", "walbox always uses the idempotent producer")
			}
		case k == "linger.ms":
			if d, ok := millis(s.v); ok {
				t.setOption("producer-linger", d, s.key)
				t.mapped(s.p, s.key, "--producer-linger", "")
			} else {
				t.fail(s.p, s.key, "not a number of milliseconds", "give a number such as 5")
			}
		case k == "max.request.size":
			if n, err := strconv.Atoi(s.v); err == nil && n > 0 {
				t.setOption("producer-batch-max-bytes", s.v, s.key)
				t.mapped(s.p, s.key, "--producer-batch-max-bytes", "the largest batch (and so record) walbox sends")
			} else {
				t.fail(s.p, s.key, "not a positive number of bytes", "give a number such as 1048576")
			}
		case k == "batch.size":
			t.warn(s.p, s.key, "Kafka's batch.size is only a target; walbox's batches grow up to --producer-batch-max-bytes (max.request.size) within --producer-linger; the records are the same")
		case k == "compression.type":
			t.warn(s.p, s.key, "walbox compresses batches as franz-go does by default (snappy where the broker allows it); consumers decompress transparently, the records are the same")
		case k == "client.id":
			t.setOption("kafka-client-id", s.v, s.key)
			t.mapped(s.p, s.key, "--kafka-client-id", "")
		case k == "partitioner.class", k == "partitioner.ignore.keys":
			t.fail(s.p, s.key, "walbox partitions with murmur2 of the key, Kafka's default partitioner", "remove it")
		case k == "key.serializer", k == "value.serializer", k == "interceptor.classes", k == "metric.reporters", k == "transactional.id":
			t.fail(s.p, s.key, "a Java class setting walbox has no equivalent for", "remove it")
		case k == "security.protocol" || strings.HasPrefix(k, "sasl.") || strings.HasPrefix(k, "ssl."):
			sec[k] = s
		case noEffectProducerKeys[k]:
			t.warn(s.p, s.key, "a Java producer tuning setting; walbox's client manages this itself, the records are the same")
		default:
			t.fail(s.p, s.key, "a producer setting walbox does not know", "remove it, or check its spelling")
		}
	}
	t.security(func(k string) (*Properties, string, string, bool) {
		s, ok := sec[k]
		if ok {
			delete(sec, k)
		}
		return s.p, s.key, s.v, ok
	})
	for _, k := range slices.Sorted(maps.Keys(sec)) {
		s := sec[k]
		t.fail(s.p, s.key, "a Kafka security setting walbox does not support", "remove it, or set walbox's --kafka-tls-* / --kafka-sasl-* options")
	}
}

var noEffectProducerKeys = map[string]bool{
	"retries": true, "delivery.timeout.ms": true, "request.timeout.ms": true, "max.in.flight.requests.per.connection": true,
	"buffer.memory": true, "retry.backoff.ms": true, "retry.backoff.max.ms": true, "reconnect.backoff.ms": true, "reconnect.backoff.max.ms": true,
	"metadata.max.age.ms": true, "metadata.max.idle.ms": true, "max.block.ms": true, "send.buffer.bytes": true, "receive.buffer.bytes": true,
	"connections.max.idle.ms": true, "socket.connection.setup.timeout.ms": true, "socket.connection.setup.timeout.max.ms": true,
	"client.dns.lookup": true, "metrics.sample.window.ms": true, "metrics.num.samples": true, "metrics.recording.level": true,
	"compression.gzip.level": true, "compression.lz4.level": true, "compression.zstd.level": true,
}

func normalizeList(v string) string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// jaasRE reads username="..." and password="..." from sasl.jaas.config.
var (
	jaasModuleRE = regexp.MustCompile(`^\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b`)
	jaasOptionRE = regexp.MustCompile(`([A-Za-z0-9_.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))`)
)

// security maps security.protocol, sasl.* and ssl.* of the producer.
// take returns a producer key's value and consumes it.
func (t *translator) security(take func(k string) (*Properties, string, string, bool)) {
	tls, sasl := false, false
	if p, key, v, ok := take("security.protocol"); ok {
		switch strings.ToUpper(v) {
		case "PLAINTEXT":
		case "SSL":
			tls = true
		case "SASL_PLAINTEXT":
			sasl = true
		case "SASL_SSL":
			tls, sasl = true, true
		default:
			t.fail(p, key, "unknown protocol", "use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
		}
		if tls {
			t.setOption("kafka-tls", "true", key)
		}
		t.mapped(p, key, "--kafka-tls / --kafka-sasl-mechanism", "")
	}
	mech, mechKey := "GSSAPI", "sasl.mechanism" // Kafka's default sasl.mechanism
	if p, key, v, ok := take("sasl.mechanism"); ok {
		mech, mechKey = strings.ToUpper(v), key
		if !sasl {
			t.warn(p, key, "security.protocol is not SASL_*, so the producer does not use SASL")
		} else {
			t.mapped(p, key, "--kafka-sasl-mechanism", "")
		}
	}
	if sasl {
		switch mech {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM", "OAUTHBEARER":
			t.setOption("kafka-sasl-mechanism", mech, mechKey)
		default:
			t.problems = append(t.problems, Problem{Key: mechKey, Value: mech,
				Why: "walbox supports SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER and AWS_MSK_IAM, not " + mech + " (GSSAPI is Kafka's default)",
				Fix: "set producer.sasl.mechanism to one of them"})
		}
	}
	if p, key, v, ok := take("sasl.jaas.config"); ok {
		m := jaasModuleRE.FindStringSubmatch(v)
		opts := map[string]string{}
		for _, o := range jaasOptionRE.FindAllStringSubmatch(v, -1) {
			val := o[3]
			if o[2] != "" || o[3] == "" {
				val = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(o[2])
			}
			opts[o[1]] = val
		}
		switch {
		case m == nil:
			t.fail(p, key, "not a JAAS login module line", `write it as org.apache.kafka.common.security.plain.PlainLoginModule required username="..." password="...";`)
		case strings.HasSuffix(m[1], "PlainLoginModule") || strings.HasSuffix(m[1], "ScramLoginModule"):
			t.setOption("kafka-sasl-username", opts["username"], key)
			t.setOption("kafka-sasl-password", opts["password"], key)
			t.mapped(p, key, "--kafka-sasl-username / --kafka-sasl-password", "")
		case strings.HasSuffix(m[1], "IAMLoginModule"):
			if unsupported := iamOptionsUnsupported(opts); len(unsupported) > 0 {
				t.fail(p, key, "walbox signs AWS_MSK_IAM with the credentials in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN only: "+
					"it does not assume a role or read a profile, so the login module's "+strings.Join(unsupported, ", ")+" would be ignored",
					"remove them and give walbox that role's or profile's credentials in those variables (for a role: aws sts assume-role, or the platform's credentials for the pod)")
				break
			}
			t.mapped(p, key, "(AWS_MSK_IAM)", "credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN")
		case strings.HasSuffix(m[1], "OAuthBearerLoginModule"):
			t.fail(p, key, "walbox reads the OAUTHBEARER token from a file, it does not fetch it", "remove it and set --kafka-sasl-oauth-token-file")
		default:
			t.fail(p, key, "login module "+m[1]+" is not supported", "use PLAIN, SCRAM or AWS_MSK_IAM")
		}
	}
	for _, k := range []string{"sasl.client.callback.handler.class", "sasl.login.callback.handler.class"} {
		if p, key, v, ok := take(k); ok {
			if strings.HasPrefix(v, "software.amazon.msk.auth.iam.") {
				t.mapped(p, key, "(AWS_MSK_IAM)", "")
			} else {
				t.fail(p, key, "a Java callback handler walbox cannot run", "remove it")
			}
		}
	}
	// TLS files: walbox reads PEM.
	if p, key, v, ok := take("ssl.truststore.location"); ok {
		_, tkey, typ, _ := take("ssl.truststore.type")
		if strings.EqualFold(typ, "PEM") {
			t.setOption("kafka-tls-ca-file", v, key)
			t.mapped(p, key, "--kafka-tls-ca-file", "")
			if tkey != "" {
				t.mapped(p, tkey, "(checked)", "PEM")
			}
			if p2, k2, _, ok := take("ssl.truststore.password"); ok {
				t.warn(p2, k2, "a PEM trust store has no password")
			}
		} else {
			t.fail(p, key, "walbox reads CA certificates from a PEM file, not a "+defaultStr(typ, "JKS")+" trust store",
				"export them (keytool -exportcert -rfc -keystore FILE -alias ALIAS > ca.pem), set ssl.truststore.type=PEM and ssl.truststore.location=ca.pem, or give --kafka-tls-ca-file")
			take("ssl.truststore.password")
		}
	}
	if p, key, v, ok := take("ssl.keystore.location"); ok {
		_, _, typ, _ := take("ssl.keystore.type")
		if strings.EqualFold(typ, "PEM") {
			t.setOption("kafka-tls-cert-file", v, key)
			t.setOption("kafka-tls-key-file", v, key)
			t.mapped(p, key, "--kafka-tls-cert-file and --kafka-tls-key-file", "one PEM file with the certificate chain and the key")
		} else {
			t.fail(p, key, "walbox reads the client certificate and key from PEM files, not a "+defaultStr(typ, "JKS")+" key store",
				"convert it (openssl pkcs12 -in store.p12 -nodes) and set ssl.keystore.type=PEM, or give --kafka-tls-cert-file and --kafka-tls-key-file")
		}
		take("ssl.keystore.password")
	}
	if p, key, v, ok := take("ssl.key.password"); ok && v != "" {
		t.fail(p, key, "walbox reads only unencrypted private keys", "decrypt the key (openssl pkey -in key.pem -out plain.pem) and restrict the file's permissions")
	}
	for _, k := range []string{"ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.keystore.key"} {
		if p, key, _, ok := take(k); ok {
			t.fail(p, key, "walbox reads certificates and keys from PEM files, not inline", "write the PEM to a file and use ssl.*.location with type PEM, or --kafka-tls-* options")
		}
	}
	if p, key, v, ok := take("ssl.endpoint.identification.algorithm"); ok {
		if strings.EqualFold(v, "https") {
			t.mapped(p, key, "(default)", "walbox verifies the broker's host name")
		} else {
			t.fail(p, key, "walbox always verifies the broker's host name", "remove it; if the certificate carries another name, set --kafka-tls-server-name")
		}
	}
	for _, k := range []string{"ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.provider"} {
		if p, key, _, ok := take(k); ok {
			t.warn(p, key, "a Java TLS setting; walbox uses Go's TLS 1.2+ defaults, the records are the same")
		}
	}
}

func defaultStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// iamOptionsUnsupported returns, sorted, the options of the AWS MSK IAM
// login module walbox would not apply: all but awsDebugCreds, which only
// logs the caller's identity. awsRoleArn, awsProfileName and the other
// role and STS options choose other credentials than the environment's;
// dropping them silently would sign as someone else, or fail.
func iamOptionsUnsupported(opts map[string]string) []string {
	var out []string
	for k := range opts {
		if k != "awsDebugCreds" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
