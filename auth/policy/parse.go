package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/metalloc/metalloc/auth"
)

// A check is one parsed check string (oslo.policy's _checks): it decides
// from the target, the credentials and (for rule:) the other rules.
type check interface {
	allowed(e *Enforcer, target map[string]string, creds auth.Credentials, depth int) bool
}

type (
	constCheck bool                         // "@", "" (true) and "!" (false)
	andCheck   []check                      // a and b and ...
	orCheck    []check                      // a or b or ...
	notCheck   struct{ c check }            // not a
	ruleCheck  string                       // rule:<name>
	roleCheck  string                       // role:<name>, compared case-insensitively
	attrCheck  struct{ kind, match string } // <credential attribute or 'literal'>:<match with %(key)s>
)

// maxDepth bounds rule: references, so that a cycle in a policy file is a
// refusal, not a hang.
const maxDepth = 32

func (c constCheck) allowed(*Enforcer, map[string]string, auth.Credentials, int) bool { return bool(c) }

func (c andCheck) allowed(e *Enforcer, t map[string]string, cr auth.Credentials, d int) bool {
	for _, x := range c {
		if !x.allowed(e, t, cr, d) {
			return false
		}
	}
	return true
}

func (c orCheck) allowed(e *Enforcer, t map[string]string, cr auth.Credentials, d int) bool {
	for _, x := range c {
		if x.allowed(e, t, cr, d) {
			return true
		}
	}
	return false
}

func (c notCheck) allowed(e *Enforcer, t map[string]string, cr auth.Credentials, d int) bool {
	return !c.c.allowed(e, t, cr, d)
}

// rule: a reference to a rule that does not exist is false, as in
// oslo.policy.
func (c ruleCheck) allowed(e *Enforcer, t map[string]string, cr auth.Credentials, d int) bool {
	r, ok := e.rules[string(c)]
	if !ok || d >= maxDepth {
		return false
	}
	return r.allowed(e, t, cr, d+1)
}

func (c roleCheck) allowed(_ *Enforcer, t map[string]string, cr auth.Credentials, _ int) bool {
	role, ok := substitute(string(c), t)
	return ok && cr.HasRole(role)
}

var literalKind = regexp.MustCompile(`^(?:'[^']*'|"[^"]*"|True|False|-?[0-9]+)$`)

// allowed: the match (after %(key)s substitution from the target; a
// missing or empty key is false) must equal the credential attribute
// named by kind, or kind itself when kind is a literal ('string', a
// number, True, False), as oslo.policy's GenericCheck.
func (c attrCheck) allowed(_ *Enforcer, t map[string]string, cr auth.Credentials, _ int) bool {
	match, ok := substitute(c.match, t)
	if !ok {
		return false
	}
	if literalKind.MatchString(c.kind) {
		lit := c.kind
		if s, err := strconv.Unquote(strings.ReplaceAll(lit, "'", `"`)); err == nil {
			lit = s
		}
		return match == lit
	}
	if c.kind == "roles" {
		return cr.HasRole(match)
	}
	v, known := credAttr(cr, c.kind)
	return known && match == v
}

// credAttr is the credential attribute kind as oslo.context's
// to_policy_values gives it, stringified as Python would: an unset value
// is "None", booleans are "True"/"False". known is false for an attribute
// credentials do not have (a failed check in oslo.policy).
func credAttr(cr auth.Credentials, kind string) (v string, known bool) {
	none := func(s string) string {
		if s == "" {
			return "None"
		}
		return s
	}
	switch kind {
	case "user_id":
		return none(cr.UserID), true
	case "project_id", "tenant":
		return none(cr.ProjectID), true
	case "project_name":
		return none(cr.ProjectName), true
	case "project_domain_id":
		return none(cr.ProjectDomainID), true
	case "domain_id":
		return none(cr.DomainID), true
	case "system_scope":
		return none(cr.SystemScope), true
	case "is_admin_project":
		return pyBool(!cr.NotAdminProject), true
	}
	return "", false
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

var substitution = regexp.MustCompile(`%\(([^)]+)\)s`)

// substitute replaces each %(key)s in s by target[key]; ok is false when a
// key is missing or empty (oslo.policy: a KeyError is a failed check; an
// unset owner must never match).
func substitute(s string, target map[string]string) (string, bool) {
	ok := true
	out := substitution.ReplaceAllStringFunc(s, func(m string) string {
		v := target[m[2:len(m)-2]]
		if v == "" {
			ok = false
		}
		return v
	})
	return out, ok
}

// parse compiles a check string: "" and "@" allow, "!" refuses; checks
// are "kind:match" (role:, rule:, or a credential attribute or literal
// compared with match); "not" binds tighter than "and", which binds
// tighter than "or"; parentheses group. Errors name the offending token.
func parse(s string) (check, error) {
	toks := tokenize(s)
	if len(toks) == 0 {
		return constCheck(true), nil
	}
	p := &parser{toks: toks}
	c, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	return c, nil
}

// tokenize splits on white space and peels parentheses off the ends of
// tokens, as oslo.policy's tokenizer does.
func tokenize(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		var tail []string
		for strings.HasPrefix(f, "(") {
			out = append(out, "(")
			f = f[1:]
		}
		for strings.HasSuffix(f, ")") {
			tail = append(tail, ")")
			f = f[:len(f)-1]
		}
		if f != "" {
			out = append(out, f)
		}
		out = append(out, tail...)
	}
	return out
}

type parser struct {
	toks []string
	pos  int
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) or() (check, error) {
	first, err := p.and()
	if err != nil {
		return nil, err
	}
	terms := orCheck{first}
	for strings.EqualFold(p.peek(), "or") {
		p.pos++
		next, err := p.and()
		if err != nil {
			return nil, err
		}
		terms = append(terms, next)
	}
	if len(terms) == 1 {
		return first, nil
	}
	return terms, nil
}

func (p *parser) and() (check, error) {
	first, err := p.not()
	if err != nil {
		return nil, err
	}
	terms := andCheck{first}
	for strings.EqualFold(p.peek(), "and") {
		p.pos++
		next, err := p.not()
		if err != nil {
			return nil, err
		}
		terms = append(terms, next)
	}
	if len(terms) == 1 {
		return first, nil
	}
	return terms, nil
}

func (p *parser) not() (check, error) {
	if strings.EqualFold(p.peek(), "not") {
		p.pos++
		c, err := p.not()
		if err != nil {
			return nil, err
		}
		return notCheck{c}, nil
	}
	return p.atom()
}

func (p *parser) atom() (check, error) {
	tok := p.peek()
	switch {
	case tok == "":
		return nil, fmt.Errorf("unexpected end of rule")
	case tok == "(":
		p.pos++
		c, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, fmt.Errorf("missing )")
		}
		p.pos++
		return c, nil
	case tok == ")" || strings.EqualFold(tok, "and") || strings.EqualFold(tok, "or"):
		return nil, fmt.Errorf("unexpected %q", tok)
	}
	p.pos++
	switch tok {
	case "@":
		return constCheck(true), nil
	case "!":
		return constCheck(false), nil
	}
	kind, match, ok := strings.Cut(tok, ":")
	if !ok || kind == "" {
		return nil, fmt.Errorf("%q is not a check (kind:match)", tok)
	}
	switch kind {
	case "rule":
		return ruleCheck(match), nil
	case "role":
		return roleCheck(match), nil
	}
	return attrCheck{kind: kind, match: match}, nil
}
