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
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	flags, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		Usage(out)
		return Config{}, flag.ErrHelp
	}
	if err != nil {
		return Config{}, err
	}

	c := Defaults()
	var errs []error
	// failed holds the options whose last given value did not parse: their
	// field keeps an older value, which is not worth a second message.
	failed := map[*option]bool{}
	set := func(o *option, v, where string) error {
		if err := o.value.set(&c, v); err != nil {
			failed[o] = true
			return o.errorFor(v, err, where)
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
			return Config{}, problemf(err, "cannot read config file %q given by %s: %v; check the path", path, from, cause)
		}
		errs = append(errs, applyFile(path, data, set)...)
	}

	for _, o := range options {
		if o.value.set == nil {
			continue
		}
		if v := getenv(o.env); v != "" {
			if err := set(o, v, "environment"); err != nil {
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
		if err := set(o, v, ""); err != nil {
			errs = append(errs, err)
		}
	}

	errs = append(errs, c.problems(failed)...)
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
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

func parseFlags(args []string) (flagValues, error) {
	vals := flagValues{}
	fs := flag.NewFlagSet("walbox run", flag.ContinueOnError)
	// The flag package prints parse errors and usage to its output; Load
	// returns the error instead and prints usage only for --help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, o := range options {
		fs.Var(rawFlag{o: o, vals: vals}, o.flag, o.help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, problemf(nil, "%s; run \"walbox run --help\" to list the options", flagErrorMessage(err))
	}
	if fs.NArg() > 0 {
		return nil, problemf(nil, "unexpected argument %q: walbox run takes only options, written --name value or --name=value", fs.Arg(0))
	}
	return vals, nil
}

// flagErrorMessage rewords the flag package's errors, which write flags
// with one dash and do not suggest anything.
func flagErrorMessage(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		names := make([]string, 0, len(options))
		for _, o := range options {
			names = append(names, o.flag)
		}
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
