package config

import (
	"errors"
	"flag"
	"strings"
)

// SourceKind says which of Load's inputs gave an option its value.
type SourceKind int

const (
	SourceDefault SourceKind = iota
	SourceFile
	SourceEnv
	SourceFlag
)

var sourceKindNames = [...]string{
	SourceDefault: "default",
	SourceFile:    "file",
	SourceEnv:     "env",
	SourceFlag:    "flag",
}

func (k SourceKind) String() string { return sourceKindNames[k] }

// Setting is one option's effective value and where it came from, as
// `walbox config check` prints it.
type Setting struct {
	Flag string // without dashes
	Env  string
	Key  string // YAML key, "" when the option cannot be set in the file
	// Value is the effective value, with secrets (the password of
	// --pg-dsn, any option with a redact function) replaced by "xxxxx".
	Value string
	Kind  SourceKind
	// Source names the input: "--flag", the environment variable,
	// "FILE:LINE", or "default".
	Source string
	// Invalid is true when the value given did not parse; Value then
	// says so instead of showing the value the field kept.
	Invalid bool
}

// Sources reads the configuration as Load does and returns every option
// cmd uses with its effective value and source, in the order of Usage.
// Unlike Load it returns the settings also when the configuration has
// problems (err joins them, each wrapping ErrInvalid), so that the user
// sees what was read; settings is nil only when the arguments or the file
// could not be read at all. On -h, -help or --help err is flag.ErrHelp.
func (cmd Command) Sources(args []string, getenv func(string) string) (settings []Setting, c Config, err error) {
	c, where, failed, err := cmd.load(args, getenv)
	if where == nil {
		return nil, Config{}, err
	}
	use, _ := cmd.use() // load has checked cmd.Options
	for _, o := range options {
		if o.value.set == nil || (use != nil && !use[o]) {
			continue
		}
		s := Setting{Flag: o.flag, Env: o.env, Key: o.yaml, Value: o.value.get(&c), Kind: SourceDefault, Source: "default"}
		if from, ok := where[o]; ok {
			switch from {
			case "":
				s.Kind, s.Source = SourceFlag, "--"+o.flag
			case "environment":
				s.Kind, s.Source = SourceEnv, o.env
			default:
				s.Kind, s.Source = SourceFile, from
			}
		}
		if o.redact != nil {
			s.Value = o.redact(s.Value)
		}
		if failed[o] {
			// The field kept an older value; the problem names the one given.
			s.Value, s.Invalid = "(invalid, see problems)", true
		}
		settings = append(settings, s)
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil, Config{}, err
	}
	return settings, c, err
}

// Scrub replaces every secret of c (the password of PGDSN in each form a
// parser decodes it to) in text by "xxxxx": a last guard for text that
// came from elsewhere, such as a driver's error.
func (c Config) Scrub(text string) string {
	_, secrets := redactDSN(c.PGDSN)
	var keep []string
	for _, s := range secrets {
		if strings.TrimSpace(s) != "" {
			keep = append(keep, s)
		}
	}
	out, ok := scrubSecrets(text, keep)
	if !ok {
		return "(text withheld: it may contain the password of --pg-dsn)"
	}
	return out
}
