package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Load builds the Config of `walbox run` from args (the arguments after
// "run"), the environment read through getenv, and the YAML file named by
// --config or WALBOX_CONFIG, read with os.ReadFile. Precedence, highest
// first: flags, environment variables, the file, Defaults. An environment
// variable set to "" counts as unset. A flag given twice keeps its last
// value, except --kafka-brokers, whose values add up.
//
// A nil getenv means an empty environment.
//
// The Config returned is validated. Every problem found (values that do
// not parse, unknown YAML keys, failed checks) is reported at once, joined
// with errors.Join; each wraps ErrInvalid, and a missing file also wraps
// fs.ErrNotExist. On -h, -help or --help Load writes Usage to out and
// returns flag.ErrHelp, which the caller should treat as success.
//
// Load has no side effects other than reading the file; it is safe for
// concurrent use if getenv is.
func Load(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c, err := Command{Name: "walbox run"}.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		Usage(out)
	}
	return c, err
}

// Command is a program that reads walbox's configuration, or part of it:
// walbox run, and slotctl's subcommands, which take the same flags,
// WALBOX_* variables and --config file, so that one walbox.yaml serves
// both.
type Command struct {
	// Name is the command line, e.g. "slotctl create", used in messages.
	Name string
	// Options are the flags (without dashes) of the options the command
	// uses; nil means all of them. --config is always accepted. Only these
	// are accepted as flags, read from the environment and checked; the
	// file may hold every key of walbox run (unknown keys are still
	// reported), and those the command does not use are ignored.
	Options []string
	// Flags holds the command's own flags (slotctl's --timeout, --json),
	// defined by the caller; nil when it has none. Load adds the options to
	// it and parses args with it, so they may be mixed in any order; a flag
	// named like an option panics there, as flag.FlagSet.Var does.
	Flags *flag.FlagSet
}

// Load reads the Config of cmd as the package-level Load does, from args,
// the environment read through getenv (nil: empty) and the file named by
// --config or WALBOX_CONFIG, and validates the options cmd uses. Options
// it does not use keep their defaults. On -h, -help or --help it returns
// flag.ErrHelp without printing anything (see WriteOptions).
func (cmd Command) Load(args []string, getenv func(string) string) (Config, error) {
	c, _, _, err := cmd.load(args, getenv)
	if err != nil {
		return Config{}, err
	}
	return c, nil
}

// load is Load that also returns where each option's value came from
// ("FILE:LINE", "environment", "" for a flag; absent: the default) and,
// when the options were read, the Config even if it has problems, for
// Sources, and the options whose last given value did not parse.
func (cmd Command) load(args []string, getenv func(string) string) (Config, map[*option]string, map[*option]bool, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	use, err := cmd.use()
	if err != nil {
		return Config{}, nil, nil, err
	}
	used := func(o *option) bool { return use == nil || use[o] }
	flags, err := cmd.parseFlags(args, used)
	if err != nil {
		return Config{}, nil, nil, err
	}

	c := Defaults()
	var errs []error
	// failed holds the options whose last given value did not parse: their
	// field keeps an older value, which is not worth a second message.
	failed := map[*option]bool{}
	// where holds the source of each option's value: "FILE:LINE",
	// "environment", or "" for a flag.
	where := map[*option]string{}
	set := func(o *option, v, from string, shapeErr error) error {
		if !used(o) {
			return nil // a key of walbox run that this command ignores
		}
		where[o] = from
		err := shapeErr
		if err == nil {
			err = o.value.set(&c, v)
		}
		if err != nil {
			failed[o] = true
			return o.errorFor(v, err, from)
		}
		delete(failed, o)
		return nil
	}

	path, from := "", ""
	if v, ok := flags[configOption]; ok {
		path, from = v[len(v)-1], "--config"
	} else if v := getenv(configOption.env); v != "" {
		path, from = v, configOption.env
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			cause := err
			var pe *fs.PathError
			if errors.As(err, &pe) {
				cause = pe.Err
			}
			return Config{}, nil, nil, problemf(err, "cannot read config file %q given by %s: %v; check the path", path, from, cause)
		}
		errs = append(errs, applyFile(path, data, set)...)
	}

	for _, o := range options {
		if o.value.set == nil || !used(o) {
			continue
		}
		if v := getenv(o.env); v != "" {
			if err := set(o, v, "environment", nil); err != nil {
				errs = append(errs, err)
			}
		}
	}

	for _, o := range options {
		vals, ok := flags[o]
		if !ok || o.value.set == nil {
			continue
		}
		v := vals[len(vals)-1]
		if o.value.list {
			v = strings.Join(vals, ",")
		}
		if err := set(o, v, "", nil); err != nil {
			errs = append(errs, err)
		}
	}

	if used(debeziumConfigOption()) {
		errs = append(errs, applyDebezium(&c, where, set)...)
	}
	c.PGDSN = withoutReplication(c.PGDSN)
	errs = append(errs, c.problems(failed, use, where)...)
	return c, where, failed, errors.Join(errs...)
}

// use returns the options cmd uses, nil meaning all.
func (cmd Command) use() (map[*option]bool, error) {
	if cmd.Options == nil {
		return nil, nil
	}
	use := map[*option]bool{configOption: true}
	for _, name := range cmd.Options {
		o := optionByFlag(name)
		if o == nil {
			return nil, fmt.Errorf("config: %s uses an unknown option %q", cmd.Name, name) // a programming error
		}
		use[o] = true
	}
	return use, nil
}

func optionByFlag(name string) *option {
	for _, o := range options {
		if o.flag == name {
			return o
		}
	}
	return nil
}

// flagValues holds the raw values of the flags given, in order. Flags are
// only collected while parsing and converted later, by the same code as the
// environment and the file, so that a bad value gets the same message
// whatever its source (the flag package's own message names neither the
// environment variable nor what is accepted).
type flagValues map[*option][]string

type rawFlag struct {
	o    *option
	vals flagValues
}

func (f rawFlag) String() string { return "" }

// IsBoolFlag lets a boolean option be given as a bare --name.
func (f rawFlag) IsBoolFlag() bool { return f.o.value.arg == "BOOL" }

func (f rawFlag) Set(s string) error {
	f.vals[f.o] = append(f.vals[f.o], s)
	return nil
}

func (cmd Command) parseFlags(args []string, used func(*option) bool) (flagValues, error) {
	vals := flagValues{}
	fs := cmd.Flags
	if fs == nil {
		fs = flag.NewFlagSet(cmd.Name, flag.ContinueOnError)
	}
	// The flag package prints parse errors and usage to its output; Load
	// returns the error instead and leaves help to the caller.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, o := range options {
		if used(o) {
			fs.Var(rawFlag{o: o, vals: vals}, o.flag, o.help)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, problemf(nil, "%s; run \"%s --help\" to list the options", flagErrorMessage(fs, err), cmd.Name)
	}
	if fs.NArg() > 0 {
		return nil, problemf(nil, "unexpected argument %q: %s takes only options, written --name value or --name=value", fs.Arg(0), cmd.Name)
	}
	return vals, nil
}

// flagErrorMessage rewords the flag package's errors, which write flags
// with one dash and do not suggest anything.
func flagErrorMessage(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = fmt.Sprintf("unknown option --%s", name)
		if s := closest(name, names); s != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", s)
		}
		return msg
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Sprintf("--%s needs a value", strings.TrimLeft(name, "-"))
	}
	return msg
}
