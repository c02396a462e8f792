package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// This file names the options behind the problems that only the server
// reveals: slotctl.Check's (a missing slot, a publication that does not
// match, a role without REPLICATION) and the router's columns the table
// lacks. The owners find them; config only says which flag, environment
// variable and YAML key a problem belongs to, as problems.go does for
// the values.

// ServerError is a problem found on the Postgres server that one option
// can fix: its flag, environment variable and YAML key, the value it has,
// and the owner's error, which says what was found and the fix.
type ServerError struct {
	Flag  string // without dashes
	Env   string
	Key   string // YAML key
	Value string // with secrets redacted
	Err   error
}

// Error formats the problem as
//
//	--flag "value" (ENV, YAML key KEY): REASON
func (e *ServerError) Error() string {
	return fmt.Sprintf("--%s %q (%s, YAML key %s): %s", e.Flag, e.Value, e.Env, e.Key, serverReason(e.Err))
}

// Unwrap returns the owner's error, so that its sentinels (slotctl's,
// router.ErrInvalidConfig) still match with errors.Is.
func (e *ServerError) Unwrap() error { return e.Err }

// serverOptions say which option fixes a slotctl problem. The problems of
// the server's settings (wal_level, max_wal_senders) are not here: no
// option fixes them.
var serverOptions = []struct {
	sentinel error
	flag     string
}{
	{slotctl.ErrTableNotFound, "table"},
	{slotctl.ErrTableNotReadable, "table"},
	{slotctl.ErrPublicationNotFound, "publication"},
	{slotctl.ErrPublicationMismatch, "publication"},
	{slotctl.ErrPublicationPrivilege, "publication"},
	{slotctl.ErrSlotNotFound, "slot"},
	{slotctl.ErrSlotVanished, "slot"},
	{slotctl.ErrSlotMismatch, "slot"},
	{slotctl.ErrSlotLost, "slot"},
	// The role is the DSN's user.
	{slotctl.ErrNoReplicationPrivilege, "pg-dsn"},
	{slotctl.ErrEmitMessagePublic, "message-prefix"},
	// A takeover snapshot that did not finish: start again with it.
	{snapshot.ErrSnapshotPending, "snapshot"},
}

// ServerProblems splits err, as slotctl.Check and the checks of `walbox
// run`'s start return it, into its problems, each naming the option that
// fixes it (a *ServerError) when there is one: a column the table lacks
// under the --column-* option (or --topic) that names it, a missing slot
// under --slot, a role without REPLICATION under --pg-dsn. A problem of
// the server's own settings (wal_level) is returned as it is.
func (c Config) ServerProblems(err error) []error {
	var out []error
	for _, e := range Split(err) {
		out = append(out, c.serverProblem(e))
	}
	return out
}

func (c Config) serverProblem(err error) error {
	var ce *router.ColumnError
	if errors.As(err, &ce) {
		o := optionByRouterField(ce.Field)
		if o == nil {
			return err
		}
		return &ServerError{Flag: o.flag, Env: o.env, Key: o.yaml, Value: o.value.get(&c),
			Err: columnReason{ce, ce.Reason(func(f router.Field) string {
				if fo := optionByRouterField(f); fo != nil {
					return "--" + fo.flag
				}
				return string(f)
			}, false)}}
	}
	if errors.Is(err, slotctl.ErrUnsupportedVersion) && c.FailoverSlot && strings.Contains(err.Error(), "failover") {
		return c.serverErrorFor(optionByFlag("failover-slot"), err)
	}
	for _, so := range serverOptions {
		if errors.Is(err, so.sentinel) {
			return c.serverErrorFor(optionByFlag(so.flag), err)
		}
	}
	return err
}

func (c Config) serverErrorFor(o *option, err error) error {
	v := o.value.get(&c)
	if o.redact != nil {
		v = o.redact(v)
	}
	return &ServerError{Flag: o.flag, Env: o.env, Key: o.yaml, Value: v, Err: err}
}

// columnReason is a *router.ColumnError with the reason written with
// walbox's flags.
type columnReason struct {
	err    *router.ColumnError
	reason string
}

func (r columnReason) Error() string { return r.reason }
func (r columnReason) Unwrap() error { return r.err }

// serverReason is an owner's error without its package prefix, which the
// option's name replaces.
func serverReason(err error) string {
	msg := err.Error()
	for _, prefix := range []string{"slotctl: ", "router: ", router.ErrInvalidConfig.Error() + ": "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return msg
}

// Split undoes errors.Join, nested ones too, into the problems Load,
// Validate, Sources and ServerProblems report. Only errors.Join's errors
// are split: a problem that wraps several errors itself (an unreadable
// file wraps ErrInvalid and fs.ErrNotExist; fmt.Errorf with two %w) stays
// one.
func Split(err error) []error {
	if err == nil {
		return nil
	}
	if reflect.TypeOf(err) != joinType {
		return []error{err}
	}
	var out []error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		out = append(out, Split(e)...)
	}
	return out
}

// joinType is the type of errors.Join's errors, which the errors package
// does not export.
var joinType = reflect.TypeOf(errors.Join(errors.New("a"), errors.New("b")))
