package pgtest

// WithPasswordAuth starts the server so that TCP connections of every role
// but postgres authenticate with scram-sha-256, as a production server's
// pg_hba.conf does; postgres (pgtest itself, and tests' superuser
// connections) and the unix socket stay trusted. A role without a password
// then cannot connect over TCP. Not combinable with WithTLS.
func WithPasswordAuth() func(*Options) {
	return func(o *Options) { o.PasswordAuth = true }
}

// passwordHBA is the pg_hba.conf of Options.PasswordAuth. The first
// matching line wins, so postgres is trusted before the password lines.
const passwordHBA = "# written by walbox internal/pgtest: passwords over TCP, except for postgres\n" +
	"local all         all               trust\n" +
	"local replication all               trust\n" +
	"host  all         postgres 127.0.0.1/32 trust\n" +
	"host  replication postgres 127.0.0.1/32 trust\n" +
	"host  all         all      127.0.0.1/32 scram-sha-256\n" +
	"host  replication all      127.0.0.1/32 scram-sha-256\n"
