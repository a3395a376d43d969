package topology

import (
	"fmt"
	"regexp"
	"strings"
)

// Level is one level of the topology: a name ("rack") and the node field its
// values come from (Source). The JSON shape is that of GET /v1/topology's
// "levels" items.
//
// Source is one of
//
//	extra.KEY       the node's extra[KEY] (numbers and booleans as their JSON text)
//	properties.KEY  the node's properties[KEY]
//	trait:PREFIX    the rest of the node's first trait, in byte order, that
//	                starts with PREFIX (trait:CUSTOM_RACK_ gives "07" for CUSTOM_RACK_07)
//	aggregate       the smallest aggregate uuid of the node's Placement
//	                resource provider
type Level struct {
	Name   string `json:"name"`
	Source string `json:"source"`
}

// MaxLevels bounds the number of levels a topology may have.
const MaxLevels = 8

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)
	prefixRE = regexp.MustCompile(`^[A-Z0-9_]+$`) // what trait names are made of
)

// Validate checks l's name and source, with an error that says what a
// valid one looks like.
func (l Level) Validate() error {
	if !nameRE.MatchString(l.Name) {
		return fmt.Errorf("invalid topology level name %q: a letter followed by up to 62 letters, digits, '_' or '-'", l.Name)
	}
	src := l.Source
	switch {
	case src == "aggregate":
	case strings.HasPrefix(src, "extra."):
		if len(src) == len("extra.") {
			return fmt.Errorf("invalid source %q of topology level %s: extra.KEY needs a key", src, l.Name)
		}
	case strings.HasPrefix(src, "properties."):
		if len(src) == len("properties.") {
			return fmt.Errorf("invalid source %q of topology level %s: properties.KEY needs a key", src, l.Name)
		}
	case strings.HasPrefix(src, "trait:"):
		if !prefixRE.MatchString(src[len("trait:"):]) {
			return fmt.Errorf("invalid source %q of topology level %s: trait:PREFIX needs a prefix of capital letters, digits and _", src, l.Name)
		}
	default:
		return fmt.Errorf("invalid source %q of topology level %s: want extra.KEY, properties.KEY, trait:PREFIX or aggregate", src, l.Name)
	}
	return nil
}

// String is the level as ParseLevel reads it: NAME=SOURCE.
func (l Level) String() string { return l.Name + "=" + l.Source }

// FormatLevels writes levels as ParseLevels reads them, space-separated:
// "row=extra.row rack=extra.rack".
func FormatLevels(levels []Level) string {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.String()
	}
	return strings.Join(names, " ")
}

// ParseLevel reads one level written NAME=SOURCE ("rack=extra.rack",
// "rack=trait:CUSTOM_RACK_") and validates it.
func ParseLevel(s string) (Level, error) {
	name, src, ok := strings.Cut(s, "=")
	if !ok {
		return Level{}, fmt.Errorf("invalid topology level %q: want NAME=SOURCE, e.g. rack=extra.rack", s)
	}
	l := Level{Name: strings.TrimSpace(name), Source: strings.TrimSpace(src)}
	return l, l.Validate()
}

// ParseLevels reads levels written NAME=SOURCE, coarse to fine, and
// validates the list (ValidateLevels).
func ParseLevels(args []string) ([]Level, error) {
	levels := make([]Level, 0, len(args))
	for _, a := range args {
		l, err := ParseLevel(a)
		if err != nil {
			return nil, err
		}
		levels = append(levels, l)
	}
	return levels, ValidateLevels(levels)
}

// ValidateLevels checks every level and that the list has at most
// MaxLevels levels with distinct names. An empty list is valid: no
// topology (groups may then only use the rule none).
func ValidateLevels(levels []Level) error {
	if len(levels) > MaxLevels {
		return fmt.Errorf("too many topology levels: %d, at most %d", len(levels), MaxLevels)
	}
	seen := make(map[string]bool, len(levels))
	for _, l := range levels {
		if err := l.Validate(); err != nil {
			return err
		}
		if seen[l.Name] {
			return fmt.Errorf("topology level %s is given twice", l.Name)
		}
		seen[l.Name] = true
	}
	return nil
}

// LevelIndex returns the position of the level called name, or an error
// naming the levels there are (for a group's required/preferred level).
func LevelIndex(levels []Level, name string) (int, error) {
	for i, l := range levels {
		if l.Name == name {
			return i, nil
		}
	}
	if len(levels) == 0 {
		return -1, fmt.Errorf("unknown topology level %q: no topology is configured (metalloc-manage topology set)", name)
	}
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.Name
	}
	return -1, fmt.Errorf("unknown topology level %q: the levels are %s", name, strings.Join(names, ", "))
}

// DomainName names the domain whose path prefix is path: its values joined
// with "/" ("1/07").
func DomainName(path []string) string { return strings.Join(path, "/") }

// Describe words candidates of resourceClass with traits for NoFit
// messages and Request.Describe: "of baremetal-gpu with CUSTOM_A100,
// CUSTOM_IB".
func Describe(resourceClass string, traits []string) string {
	s := ""
	if resourceClass != "" {
		s = "of " + resourceClass
	}
	if len(traits) > 0 {
		if s != "" {
			s += " "
		}
		s += "with " + strings.Join(traits, ", ")
	}
	return s
}
