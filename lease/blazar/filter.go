package blazar

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// Filter is what a physical:host reservation's resource_properties and
// hypervisor_properties ask for, in metalloc's terms: a resource class
// (empty: the one the matching reservable nodes share), required and
// forbidden traits, and conditions on node properties.
//
// Blazar's filter language (its utils/plugins.py convert_requirements) is
// a JSON string: one condition [op, "$key", "value"] with op one of =,
// ==, !=, <, <=, >, >= and string operands, or ["and", cond, ...], or ""
// / [] for none. Keys map as follows (resource_properties):
//
//   - $resource_class: = or == sets the resource class;
//   - a trait name ($CUSTOM_GPU, $HW_CPU_X86_AVX2: upper case letters,
//     digits and _): = "true" requires the trait, = "false" (or != "true")
//     forbids it;
//   - $memory_mb, $cpus, $local_gb: numeric comparisons on the node
//     property of that name ($vcpus is $cpus);
//   - $cpu_arch: = and != on properties.cpu_arch;
//   - any other key: a capability of properties.capabilities
//     ("key:value,..."), compared as numbers when both sides are, else
//     = and != as text.
//
// hypervisor_properties (Nova's hypervisor fields in Blazar) accepts
// $memory_mb, $vcpus, $local_gb and $cpu_arch (as $cpus and so on);
// other keys are 400. A node without the property compared does not
// match. "or" and other shapes are 400 naming what is not supported.
type Filter struct {
	ResourceClass string
	Traits        []string
	Forbidden     []string
	conds         []cond
}

// cond is one comparison on a node property or capability.
type cond struct {
	op, key, value string
	capability     bool
}

// traitName is the shape of a trait name (Placement's custom and
// standard traits).
var traitName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// numericProps are the node properties compared as numbers.
var numericProps = map[string]string{"memory_mb": "memory_mb", "cpus": "cpus", "vcpus": "cpus", "local_gb": "local_gb"}

// ParseFilter reads resource_properties (rp) and hypervisor_properties
// (hp) of reservation n (from 1) into one Filter; a *web.Error 400 naming
// what is malformed or unsupported otherwise.
func ParseFilter(n int, rp, hp string) (*Filter, error) {
	f := &Filter{}
	for _, src := range []struct {
		field, text string
		hypervisor  bool
	}{{"resource_properties", rp, false}, {"hypervisor_properties", hp, true}} {
		conds, err := parseConds(src.text)
		if err != nil {
			return nil, web.BadRequest("Invalid reservation %d: %s %q: %v", n, src.field, src.text, err)
		}
		for _, c := range conds {
			if err := f.add(c, src.hypervisor); err != nil {
				return nil, web.BadRequest("Invalid reservation %d: %s %q: %v", n, src.field, src.text, err)
			}
		}
	}
	for _, t := range f.Traits {
		if slices.Contains(f.Forbidden, t) {
			return nil, web.BadRequest("Invalid reservation %d: trait %s is both required and forbidden", n, t)
		}
	}
	slices.Sort(f.Traits)
	slices.Sort(f.Forbidden)
	f.Traits, f.Forbidden = slices.Compact(f.Traits), slices.Compact(f.Forbidden)
	return f, nil
}

// parseConds reads one filter text into its comparisons.
func parseConds(text string) ([][3]string, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	var doc any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("not JSON (expected a condition such as [\"=\", \"$memory_mb\", \"4096\"])")
	}
	list, ok := doc.([]any)
	if !ok {
		return nil, fmt.Errorf("expected a JSON list")
	}
	if len(list) == 0 {
		return nil, nil
	}
	if head, _ := list[0].(string); head == "and" {
		if len(list) < 2 {
			return nil, fmt.Errorf(`"and" needs at least one condition`)
		}
		out := make([][3]string, 0, len(list)-1)
		for _, item := range list[1:] {
			c, err := condOf(item)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
	c, err := condOf(doc)
	if err != nil {
		return nil, err
	}
	return [][3]string{c}, nil
}

// condOf reads [op, "$key", "value"].
func condOf(item any) ([3]string, error) {
	list, ok := item.([]any)
	if ok && len(list) > 0 {
		if head, _ := list[0].(string); head == "or" || head == "not" || head == "and" {
			return [3]string{}, fmt.Errorf("%q is not supported (only one condition or [\"and\", condition, ...])", head)
		}
	}
	if !ok || len(list) != 3 {
		return [3]string{}, fmt.Errorf("expected a condition [operator, \"$key\", \"value\"], got %s", compact(item))
	}
	var c [3]string
	for i, v := range list {
		s, ok := v.(string)
		if !ok {
			return c, fmt.Errorf("condition %s: operands are strings (write \"4096\", not 4096)", compact(item))
		}
		c[i] = s
	}
	switch {
	case !slices.Contains([]string{"=", "==", "!=", "<", "<=", ">", ">="}, c[0]):
		return c, fmt.Errorf("operator %q is not supported (=, ==, !=, <, <=, >, >=)", c[0])
	case len(c[1]) < 2 || c[1][0] != '$':
		return c, fmt.Errorf("condition %s: the key is a $name", compact(item))
	case c[2] == "":
		return c, fmt.Errorf("condition %s: empty value", compact(item))
	}
	if c[0] == "==" {
		c[0] = "="
	}
	c[1] = c[1][1:]
	return c, nil
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// add maps one comparison onto f (see Filter).
func (f *Filter) add(c [3]string, hypervisor bool) error {
	op, key, value := c[0], c[1], c[2]
	equality := op == "=" || op == "!="
	switch {
	case key == "resource_class" && !hypervisor:
		if op != "=" {
			return fmt.Errorf("$resource_class takes = only")
		}
		if f.ResourceClass != "" && f.ResourceClass != value {
			return fmt.Errorf("two resource classes asked: %s and %s", f.ResourceClass, value)
		}
		f.ResourceClass = value
	case numericProps[key] != "" && (key != "cpus" || !hypervisor):
		if _, err := strconv.ParseFloat(value, 64); err != nil {
			return fmt.Errorf("$%s compares numbers, not %q", key, value)
		}
		f.conds = append(f.conds, cond{op: op, key: numericProps[key], value: value})
	case key == "cpu_arch":
		if !equality {
			return fmt.Errorf("$cpu_arch takes = and != only")
		}
		f.conds = append(f.conds, cond{op: op, key: key, value: value})
	case hypervisor:
		return fmt.Errorf("$%s is not supported in hypervisor_properties ($memory_mb, $vcpus, $local_gb, $cpu_arch are; "+
			"traits and capabilities go in resource_properties)", key)
	case traitName.MatchString(key):
		want, err := strconv.ParseBool(value)
		if err != nil || !equality {
			return fmt.Errorf("trait $%s takes = or != with \"true\" or \"false\"", key)
		}
		if want == (op == "=") {
			f.Traits = append(f.Traits, key)
		} else {
			f.Forbidden = append(f.Forbidden, key)
		}
	default:
		f.conds = append(f.conds, cond{op: op, key: key, value: value, capability: true})
	}
	return nil
}

// HasConditions reports whether f compares node properties (the nodes
// must then be listed and matched in Go: Matches).
func (f *Filter) HasConditions() bool { return len(f.conds) > 0 }

// Matches reports whether n's properties satisfy every condition of f
// (the resource class and traits are left to admission).
func (f *Filter) Matches(n node.Node) bool {
	var caps map[string]string
	for _, c := range f.conds {
		var have string
		var ok bool
		if c.capability {
			if caps == nil {
				caps = capabilities(n.Properties["capabilities"])
			}
			have, ok = caps[c.key]
		} else {
			have, ok = propertyText(n.Properties[c.key])
		}
		if !ok || !compare(have, c.op, c.value) {
			return false
		}
	}
	return true
}

// propertyText is a property's value as text (numbers as JSON writes them).
func propertyText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case json.Number:
		return x.String(), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// capabilities parses Ironic's properties.capabilities, "k1:v1,k2:v2"
// (or a JSON object).
func capabilities(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case string:
		for _, kv := range strings.Split(x, ",") {
			if k, val, ok := strings.Cut(strings.TrimSpace(kv), ":"); ok {
				out[k] = val
			}
		}
	case map[string]any:
		for k, val := range x {
			if s, ok := propertyText(val); ok {
				out[k] = s
			}
		}
	}
	return out
}

// compare applies op to have and want: as numbers when both are, else
// = and != as text (other operators false).
func compare(have, op, want string) bool {
	a, errA := strconv.ParseFloat(have, 64)
	b, errB := strconv.ParseFloat(want, 64)
	if errA == nil && errB == nil {
		switch op {
		case "=":
			return a == b
		case "!=":
			return a != b
		case "<":
			return a < b
		case "<=":
			return a <= b
		case ">":
			return a > b
		case ">=":
			return a >= b
		}
		return false
	}
	switch op {
	case "=":
		return strings.EqualFold(have, want)
	case "!=":
		return !strings.EqualFold(have, want)
	}
	return false
}

// Text renders a reservation's resource class and traits back in Blazar's
// filter language (what show returns as resource_properties): ["and",
// ["=", "$resource_class", rc], ["=", "$TRAIT", "true"], ...], or the one
// condition alone.
func Text(resourceClass string, traits, forbidden []string) string {
	conds := []any{[]string{"=", "$resource_class", resourceClass}}
	for _, t := range traits {
		conds = append(conds, []string{"=", "$" + t, "true"})
	}
	for _, t := range forbidden {
		conds = append(conds, []string{"=", "$" + t, "false"})
	}
	if len(conds) == 1 {
		return compact(conds[0])
	}
	return compact(append([]any{"and"}, conds...))
}
