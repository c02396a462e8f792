// Package config loads and checks the settings of `walbox run`.
//
// Every option is declared once, in a table (options.go), with its flag,
// environment variable, YAML key, default, help text, parser and check.
// Load reads them from flags, the environment and a YAML file, in that
// order of precedence, on top of Defaults; Usage prints the table; Validate
// runs every check and reports all problems at once.
//
//	--status-interval 2s   WALBOX_STATUS_INTERVAL=2s   status_interval: 2s
//
// Errors caused by the user's settings wrap ErrInvalid; each names the
// option (flag and environment variable), the bad value and what is
// accepted. Passwords in the Postgres DSN never appear in an error, and
// Config.Redacted masks them for logging.
//
// See example.yaml for a commented file with every key.
package config
