package config

import (
	"errors"
	"strings"

	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// This file maps the validation of the packages that own the settings to
// the options that set them. Each package decides what is valid (router,
// slotctl, pipeline); config only says which flag, environment variable and
// YAML key a problem belongs to, so that no check is written twice.
//
//   - router's errors carry the field at fault (*router.ConfigError).
//   - slotctl's and pipeline's do not, so each field is validated alone: a
//     probe Config holds only that field's value on top of a valid base,
//     and whatever it reports belongs to the option that sets the field.
//     The whole Config is validated too; a problem that only a combination
//     of fields causes is reported without an option, still as ErrInvalid.

// problems runs every option's own check and the owner packages'
// validation. Options in skip are not checked: Load passes those whose value
// failed to parse, so that the user does not get a second, confusing
// message about the value that was kept instead. A nil use means every
// option; otherwise only the options in use are checked (a slotctl command
// ignores Kafka's). where gives the source of an option's value, if known.
func (c Config) problems(skip, use map[*option]bool, where map[*option]string) []error {
	checked := func(o *option) bool { return !skip[o] && (use == nil || use[o]) }
	reported := map[*option]bool{}
	var errs []error
	add := func(o *option, e error) {
		reported[o] = true
		errs = append(errs, o.errorFor(o.value.get(&c), e, where[o]))
	}
	for _, o := range options {
		if o.check == nil || !checked(o) {
			continue
		}
		for _, e := range splitJoined(o.check(&c)) {
			add(o, e)
		}
	}
	// An option already reported by its own check is not reported again by
	// an owner (an empty DSN is "missing --pg-dsn", once).
	owned := func(o *option, e error) {
		if o == nil {
			errs = append(errs, problemf(e, "%s", ownerReason(e)))
			return
		}
		if checked(o) && !reported[o] {
			add(o, e)
		}
	}
	if c.usesAny(use, func(o *option) bool { return o.router != "" }) {
		c.routerProblems(owned)
	}
	if c.usesAny(use, func(o *option) bool { return o.slotctl != nil }) {
		probeProblems(c, use, owned,
			func(o *option) bool { return o.slotctl != nil },
			func(o *option) error {
				var s slotctl.Config // all defaults
				if o != nil {
					o.slotctl(&c, &s)
				}
				return s.Validate()
			},
			c.SlotctlConfig().Validate)
	}
	if c.usesAny(use, func(o *option) bool { return o.pipeline != nil }) {
		probeProblems(c, use, owned,
			func(o *option) bool { return o.pipeline != nil },
			func(o *option) error {
				p := validPipelineBase()
				if o != nil {
					o.pipeline(&c, &p)
				}
				return p.Validate()
			},
			c.PipelineConfig().Validate)
	}
	return errs
}

// usesAny reports whether an option in use (all when use is nil) matches.
func (c Config) usesAny(use map[*option]bool, match func(*option) bool) bool {
	for _, o := range options {
		if match(o) && (use == nil || use[o]) {
			return true
		}
	}
	return false
}

// routerProblems reports router.Config.Validate's problems, each under the
// option of its field; the reason names the other options by their flags.
func (c Config) routerProblems(report func(*option, error)) {
	for _, e := range splitJoined(c.RouterConfig().Validate()) {
		var ce *router.ConfigError
		if !errors.As(e, &ce) {
			report(nil, e)
			continue
		}
		o := optionByRouterField(ce.Field)
		if o == nil {
			report(nil, e)
			continue
		}
		reason := ce.Reason(func(f router.Field) string {
			if fo := optionByRouterField(f); fo != nil {
				return "--" + fo.flag
			}
			return string(f)
		})
		if ce.Missing {
			report(o, missingf("%s", reason))
		} else {
			report(o, badf("%s", reason))
		}
	}
}

// probeProblems validates each matching option's field alone (probe), and
// the whole configuration (all) for problems of a combination. A probe's
// problems that the base it starts from has too (probe(nil)) are not the
// option's, so they are left out.
func probeProblems(c Config, use map[*option]bool, report func(*option, error),
	match func(*option) bool, probe func(*option) error, all func() error,
) {
	base := map[string]bool{}
	for _, e := range splitJoined(probe(nil)) {
		base[e.Error()] = true
	}
	found := false
	for _, o := range options {
		if !match(o) || (use != nil && !use[o]) {
			continue
		}
		for _, e := range splitJoined(probe(o)) {
			if base[e.Error()] {
				continue
			}
			found = true
			report(o, badf("%s", ownerReason(e)))
		}
	}
	if found {
		return
	}
	for _, e := range splitJoined(all()) {
		report(nil, e)
	}
}

// validPipelineBase is a pipeline configuration that passes Validate, onto
// which one option's field is probed: the defaults, and well-formed values
// for the fields without one.
func validPipelineBase() pipeline.Config {
	p := pipeline.DefaultConfig()
	p.ConnString = "postgres://localhost/postgres"
	p.Slot, p.Publication = slotctl.DefaultSlot, slotctl.DefaultPublication
	return p
}

// ownerReason is an owner's error without its package prefix and sentinel
// text, which the option's name replaces.
func ownerReason(err error) string {
	msg := err.Error()
	for _, prefix := range []string{slotctl.ErrInvalidConfig.Error() + ": ", "pipeline: ", "slotctl: ", "router: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return msg
}

func optionByRouterField(f router.Field) *option {
	for _, o := range options {
		if o.router == f {
			return o
		}
	}
	return nil
}
