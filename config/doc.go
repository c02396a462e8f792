// Package config loads and checks the settings of `walbox run`, and of
// slotctl, which reads the same ones.
//
// Every option is declared once, in a table (options.go), with its flag,
// environment variable, YAML key, help text, parser, and which package
// uses it. Load reads them from flags, the environment and a YAML file, in
// that order of precedence, on top of Defaults; Usage prints the table;
// Validate reports all problems at once. Command.Load does the same for a
// command that uses part of the table (slotctl's subcommands): one
// walbox.yaml serves both.
//
//	--status-interval 2s   WALBOX_STATUS_INTERVAL=2s   status_interval: 2s
//
// Each setting has one owner. The packages that use a value decide its
// default and whether it is valid (router.DefaultColumns,
// router.Config.Validate, slotctl.DefaultSlot, slotctl.Config.Validate,
// pipeline.DefaultConfig, pipeline.Config.Validate); config takes their
// defaults and reports their errors under the option's flag, environment
// variable and, for a value from the file, YAML key. Config checks by
// itself only what no package owns: the DSN's syntax, brokers, the metrics
// address, logging, and ranges the pipeline would otherwise silently
// replace by its defaults.
//
// Errors caused by the user's settings wrap ErrInvalid; each names the
// option (flag and environment variable), the bad value and what is
// accepted. Passwords in the Postgres DSN never appear in an error, and
// Config.Redacted masks them for logging.
//
// See example.yaml for a commented file with every key.
package config
