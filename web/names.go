package web

import "regexp"

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
