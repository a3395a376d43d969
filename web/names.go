package web

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	logicalNameRE  = regexp.MustCompile(`^[A-Za-z0-9\-._~]+$`)
	hostnameSafeRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?(\.[a-z0-9\-_]{0,62}[a-z0-9])*\.?$`)
)

// ValidLogicalName reports whether name is acceptable as a node or
// allocation name at microversion v, as Ironic checks it: from 1.10 only
// RFC 3986 unreserved characters (ALPHA / DIGIT / "-" / "." / "_" / "~"),
// before 1.10 a lower-case hostname; at most 255 characters either way.
func ValidLogicalName(name string, v Version) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	if !v.AtLeast(1, 10) {
		return hostnameSafeRE.MatchString(name)
	}
	return logicalNameRE.MatchString(name)
}

// MaxEchoed is how many of the values a request got wrong an error message
// names (JoinSome): a request naming 10,000 unknown nodes gets a short
// answer, not one that echoes them all.
const MaxEchoed = 10

// JoinSome joins items with ", " as an error message lists them, naming
// the first MaxEchoed only and then how many more there are ("a, b, ...,
// j and 9990 more").
func JoinSome(items []string) string {
	if len(items) <= MaxEchoed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:MaxEchoed], ", "), len(items)-MaxEchoed)
}
