// Package policy is metalloc's access-rule engine: the subset of
// oslo.policy that Ironic and Placement operators use, with Ironic 21.4's
// and Placement 8.0's default rules (IronicDefaults, PlacementDefaults).
//
// A rule is a check string: "@" (always), "!" (never), "" (always),
// role:<name>, rule:<other rule>, <attribute>:<match> where the attribute
// is one of the caller's (user_id, project_id, domain_id, system_scope,
// is_admin_project, roles) or a quoted literal, and match may hold
// %(key)s substituted from the target; joined by and, or, not and
// parentheses. Ironic's targets carry node.owner, node.lessee and
// allocation.owner; Placement's project_id and user_id.
//
// As oslo.policy: with enforce_new_defaults off, a default rule that
// replaced a deprecated one allows what either allows; with enforce_scope
// on, a token whose scope (system, project, domain) is not among the
// rule's scope types is refused; a policy file (YAML or JSON, name →
// check string) replaces single rules, and its other names can be
// referenced with rule:.
package policy

import (
	"fmt"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/metalloc/metalloc/auth"
)

// Default is one registered rule: its name, check string, the token scopes
// it applies to (empty: any), and the check string of the rule it
// deprecates ("" if none).
type Default struct {
	Name            string
	Check           string
	ScopeTypes      []string
	DeprecatedCheck string
}

// Options are oslo.policy's [oslo_policy] options.
type Options struct {
	EnforceScope       bool
	EnforceNewDefaults bool
	// File is a YAML (or JSON) policy file of rule name → check string
	// overriding defaults; "" for none.
	File string
}

// Enforcer decides access by the rules in force. It is immutable and safe
// for concurrent use.
type Enforcer struct {
	rules  map[string]check
	scopes map[string][]string
	opts   Options
}

// New compiles defaults, combined with their deprecated rules unless
// opts.EnforceNewDefaults, then applies opts.File. A check string that
// does not parse is an error naming the rule (and the file).
func New(defaults []Default, opts Options) (*Enforcer, error) {
	e := &Enforcer{rules: map[string]check{}, scopes: map[string][]string{}, opts: opts}
	overrides := map[string]string{}
	if opts.File != "" {
		raw, err := os.ReadFile(opts.File)
		if err != nil {
			return nil, fmt.Errorf("policy file: %w", err)
		}
		if err := yaml.Unmarshal(raw, &overrides); err != nil {
			return nil, fmt.Errorf("policy file %s: %w", opts.File, err)
		}
	}
	for _, d := range defaults {
		c, err := parse(d.Check)
		if err != nil {
			return nil, fmt.Errorf("policy rule %s: %w", d.Name, err)
		}
		if d.DeprecatedCheck != "" && !opts.EnforceNewDefaults && d.DeprecatedCheck != d.Check {
			old, err := parse(d.DeprecatedCheck)
			if err != nil {
				return nil, fmt.Errorf("policy rule %s (deprecated): %w", d.Name, err)
			}
			c = orCheck{c, old}
		}
		e.rules[d.Name] = c
		if len(d.ScopeTypes) > 0 {
			e.scopes[d.Name] = d.ScopeTypes
		}
	}
	for name, str := range overrides {
		c, err := parse(str)
		if err != nil {
			return nil, fmt.Errorf("policy file %s: rule %s: %w", opts.File, name, err)
		}
		e.rules[name] = c
	}
	return e, nil
}

// Allowed reports whether creds may perform rule on target (an unknown
// rule is refused).
func (e *Enforcer) Allowed(rule string, target map[string]string, creds auth.Credentials) bool {
	ok, _ := e.Enforce(rule, target, creds)
	return ok
}

// Enforce is Allowed that tells an unknown rule (a programming error) from
// a refusal.
func (e *Enforcer) Enforce(rule string, target map[string]string, creds auth.Credentials) (bool, error) {
	c, ok := e.rules[rule]
	if !ok {
		return false, fmt.Errorf("policy rule %s is not registered", rule)
	}
	if scopes := e.scopes[rule]; e.opts.EnforceScope && len(scopes) > 0 && !slices.Contains(scopes, creds.ScopeType()) {
		return false, nil
	}
	return c.allowed(e, target, creds, 0), nil
}

// Has reports whether rule is registered (a default or a policy file's).
func (e *Enforcer) Has(rule string) bool {
	_, ok := e.rules[rule]
	return ok
}
