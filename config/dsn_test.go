package config

import (
	"net/url"
	"strings"
	"testing"
)

func TestRedactDSN(t *testing.T) {
	tests := []struct {
		name, dsn, want string
	}{
		{name: "URL", dsn: "postgres://u:s3cret@h:5432/db", want: "postgres://u:xxxxx@h:5432/db"},
		{name: "postgresql scheme with query", dsn: "postgresql://u:s3cret@h/db?sslmode=disable", want: "postgresql://u:xxxxx@h/db?sslmode=disable"},
		{name: "URL without password", dsn: "postgres://u@h/db", want: "postgres://u@h/db"},
		{name: "URL without userinfo", dsn: "postgres://h:5432/db", want: "postgres://h:5432/db"},
		{name: "URL empty password", dsn: "postgres://u:@h/db", want: "postgres://u:@h/db"},
		{name: "URL percent-encoded password", dsn: "postgres://u:p%40ss@h/db", want: "postgres://u:xxxxx@h/db"},
		{name: "URL password with unescaped @ and /", dsn: "postgres://u:p@ss/w@h/db", want: "postgres://u:xxxxx@h/db"},
		{name: "URL password query parameter", dsn: "postgres://u@h/db?password=s3cret&sslmode=require", want: "postgres://u@h/db?password=xxxxx&sslmode=require"},
		{name: "URL sslpassword query parameter", dsn: "postgres://h/db?sslmode=verify-full&sslpassword=keypw", want: "postgres://h/db?sslmode=verify-full&sslpassword=xxxxx"},
		{name: "URL encoded query key", dsn: "postgres://h/db?pass%77ord=s3cret", want: "postgres://h/db?pass%77ord=xxxxx"},
		{name: "URL query password with unescaped &", dsn: "postgres://h/db?password=ab&cd", want: "postgres://h/db?password=xxxxx"},
		{name: "URL multi-host", dsn: "postgres://u:s3cret@h1:5432,h2:5433/db", want: "postgres://u:xxxxx@h1:5432,h2:5433/db"},
		{name: "URL with leading space", dsn: "  postgres://u:s3cret@h/db", want: "  postgres://u:xxxxx@h/db"},
		{name: "key=value", dsn: "host=h password=s3cret dbname=d", want: "host=h password=xxxxx dbname=d"},
		{name: "key=value quoted with spaces", dsn: "host=h password = 's3 cret' dbname=d", want: "host=h password = xxxxx dbname=d"},
		{name: "key=value quoted with escaped quote", dsn: `password='it\'s secret' host=h`, want: "password=xxxxx host=h"},
		{name: "key=value backslash in unquoted value", dsn: `password=a\ b host=h`, want: "password=xxxxx host=h"},
		{name: "key=value unterminated quote", dsn: "host=h password='s3cret dbname=d", want: "host=h password=xxxxx"},
		{name: "key=value upper-case key", dsn: "PASSWORD=s3cret", want: "PASSWORD=xxxxx"},
		{name: "key=value sslpassword", dsn: "host=h sslpassword=keypw", want: "host=h sslpassword=xxxxx"},
		{name: "key=value empty password", dsn: "host=h password= dbname=d", want: "host=h password= xxxxx"}, // libpq skips spaces after '='
		{name: "key=value word without =", dsn: "host=h password s3cret", want: "host=h xxxxx xxxxx"},
		{name: "URL missing @host", dsn: "postgres://u:s3cret/db", want: "postgres://u:xxxxx/db"},
		{name: "URL numeric ports kept", dsn: "postgres://h1:5432,[::1]:5433,[::2]/db", want: "postgres://h1:5432,[::1]:5433,[::2]/db"},
		{name: "URL multi-host bad port", dsn: "postgres://h1:5432,h2:s3cret/db", want: "postgres://h1:5432,h2:xxxxx/db"},
		{name: "key=value password last and empty", dsn: "host=h password=", want: "host=h password="},
		{name: "userinfo without scheme", dsn: "u:s3cret@h:5432/db", want: "u:xxxxx@h:5432/db"},
		{name: "URL after key=value", dsn: "host=h postgres://u:s3cret@h/db?password=p2", want: "host=h postgres://u:xxxxx@h/db?password=xxxxx"},
		{name: "empty", dsn: "", want: ""},
		{name: "no secrets", dsn: "host=h user=u dbname=d", want: "host=h user=u dbname=d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := redactDSN(tt.dsn); got != tt.want {
				t.Errorf("redactDSN(%q) = %q, want %q", tt.dsn, got, tt.want)
			}
		})
	}
}

// TestDSNPasswordNeverShown checks, for well-formed and malformed DSNs, that
// the password appears neither in the error of Validate or Load nor in
// Redacted. The malformed ones are those that reach error messages.
func TestDSNPasswordNeverShown(t *testing.T) {
	const pw = "Sup3rS3cret"
	dsns := []string{
		"postgres://walbox:" + pw + "@db:5432/app",
		"postgres://walbox:" + pw + "@db:99999/app",
		"postgres://walbox:" + pw + "@db:port/app",
		"postgres://walbox:" + pw + "@[::1/app",
		"postgres://walbox:" + pw + "@db/app?sslmode=bogus",
		"postgres://walbox:" + pw + "@db/app?connect_timeout=soon",
		"postgres://walbox:" + pw + "%zz@db/app",
		"postgres://walbox:" + pw + "@db/app?noequals",
		"postgres://walbox:p@" + pw + "@db/app",
		"postgres://walbox:p/" + pw + "@db/app",
		"postgres://walbox:p?" + pw + "@db/app",
		"postgres://db/app?password=" + pw + "&bogus",
		"postgres://db/app?password=ab&" + pw,
		"postgres://db/app?password=" + pw + "&sslmode=bogus",
		"host=db password=" + pw + " port=http",
		"host=db password='" + pw + "' port=http",
		"host=db password='" + pw,
		"host=db password=" + pw + " sslmode=bogus",
		"host=db password " + pw,
		"host=db " + pw,
		"walbox:" + pw + "@db:5432/app",
		"postgres://walbox:" + pw,
		"postgres://walbox:" + pw + "/app",
		"host=db walbox:" + pw + "@db dbname=app",
		"postgresql:/walbox:" + pw + "@db/app",
		"host=db sslpassword=" + pw + " sslmode=bogus",
		"host=db sslpassword=" + pw + " sslkey=/nonexistent/key sslcert=/nonexistent/cert sslmode=require",
	}
	for _, dsn := range dsns {
		t.Run(dsn, func(t *testing.T) {
			c := valid()
			c.PGDSN = dsn
			if err := c.Validate(); err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("Validate error shows the password:\n%v", err)
			}
			_, err := load(t, []string{"--pg-dsn", dsn}, nil, "")
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("Load error shows the password:\n%v", err)
			}
			_, err = load(t, nil, nil, "pg_dsn: '"+strings.ReplaceAll(dsn, "'", "''")+"'\n")
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("Load error from file shows the password:\n%v", err)
			}
			if r := c.Redacted().PGDSN; strings.Contains(r, pw) {
				t.Errorf("Redacted().PGDSN = %q shows the password", r)
			}
		})
	}
}

func TestScrubSecrets(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		secrets []string
		want    string
		wantOK  bool
	}{
		{name: "nothing to scrub", text: "invalid port", secrets: []string{"s3cret"}, want: "invalid port", wantOK: true},
		{name: "secret replaced", text: "bad value s3cret here", secrets: []string{"s3cret"}, want: "bad value xxxxx here", wantOK: true},
		{name: "short secret withholds", text: "invalid port", secrets: []string{"po"}, wantOK: false},
		{name: "quoted fragment masked", text: `missing "=" in URI query parameter: "cdef"`, secrets: []string{"ab&cdef"}, want: `missing "=" in URI query parameter: "xxxxx"`, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := scrubSecrets(tt.text, tt.secrets)
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Errorf("scrubSecrets = %q, %v, want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// FuzzRedactDSN puts an arbitrary password in each DSN shape, encoded as
// the shape requires, and checks that neither redactDSN nor checkDSN's
// message shows it. The check only applies when the encoded password holds
// a character that the surrounding text and the mask lack, since otherwise
// it could appear legitimately.
func FuzzRedactDSN(f *testing.F) {
	for _, seed := range []string{"s3cret", "p@ss/w?rd", "a&b=c", "it's", `back\slash`, "sp ace", "%zz", "'", "xxxxx", "ünïcode"} {
		f.Add(seed)
	}
	shapes := []struct {
		name   string
		fixed  string // the text around the password
		encode func(pw string) string
		build  func(encoded string) string
	}{
		// Userinfo is inserted raw: redactDSN must cope with unescaped
		// '@', '/', '?' and ':' there, which users do write.
		{"URL userinfo", "postgres://walbox:@db:5432/app?sslmode=disable", func(pw string) string { return pw }, func(e string) string {
			return "postgres://walbox:" + e + "@db:5432/app?sslmode=disable"
		}},
		// In a query an unescaped '&' starts another parameter, so the
		// password is only the password when it is escaped.
		{"URL query", "postgres://walbox@db/app?sslmode=disable&password=", url.QueryEscape, func(e string) string {
			return "postgres://walbox@db/app?sslmode=disable&password=" + e
		}},
		{"key=value quoted", `host=db password= dbname=app`, func(pw string) string {
			return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		}, func(e string) string {
			return "host=db password=" + e + " dbname=app"
		}},
	}
	distinctive := func(s, fixed string) bool {
		return s != "" && strings.ContainsFunc(s, func(r rune) bool { return !strings.ContainsRune(fixed+redactMask, r) })
	}
	f.Fuzz(func(t *testing.T, pw string) {
		for _, s := range shapes {
			enc := s.encode(pw)
			if !distinctive(enc, s.fixed) {
				continue
			}
			dsn := s.build(enc)
			red, _ := redactDSN(dsn)
			if strings.Contains(red, enc) {
				t.Errorf("%s: redactDSN(%q) = %q shows the password", s.name, dsn, red)
			}
			if err := checkDSN(dsn); err != nil {
				msg := options[0].errorFor(dsn, err, "").Error()
				if strings.Contains(msg, enc) || distinctive(pw, s.fixed) && strings.Contains(msg, pw) {
					t.Errorf("%s: checkDSN(%q) error shows the password: %s", s.name, dsn, msg)
				}
			}
		}
	})
}

// TestWithoutReplication: a DSN written for a replication tool
// (replication=database) is accepted; walbox and slotctl open ordinary
// sessions with it, so the parameter is dropped, and nothing else changes.
//
// Regression (issue 7, item 9): slotctl accepted such a DSN but walbox run
// passed it unchanged to its ordinary session for the slot setup, where a
// walsender session refuses the queries, and exited 1.
func TestWithoutReplication(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://walbox:pw@db:5432/app?replication=database", "postgres://walbox:pw@db:5432/app"},
		{"postgres://walbox:pw@db/app?sslmode=disable&replication=database&application_name=x", "postgres://walbox:pw@db/app?sslmode=disable&application_name=x"},
		{"postgres://walbox:p%26w@db/app?replication=true", "postgres://walbox:p%26w@db/app"},
		{"host=db user=walbox password='a b' replication=database dbname=app", "host=db user=walbox password='a b'  dbname=app"},
		{"host=db replication = 'database' dbname=app", "host=db  dbname=app"},
		{"postgres://walbox:pw@db/app", "postgres://walbox:pw@db/app"},
		{"host=db dbname=app", "host=db dbname=app"},
		{"not a dsn", "not a dsn"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := withoutReplication(tt.in); got != tt.want {
				t.Errorf("withoutReplication(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	c, err := load(t, []string{"--pg-dsn", "postgres://walbox:pw@db/app?replication=database"}, nil, "")
	if err != nil || c.PGDSN != "postgres://walbox:pw@db/app" {
		t.Errorf("Load: PGDSN %q, err %v; want the DSN without replication", c.PGDSN, err)
	}
}
