package policy

import (
	"testing"

	"github.com/metalloc/metalloc/auth"
)

// FuzzParse: any check string (as a policy file may hold) compiles or is
// refused with an error, and a compiled check evaluates for any caller
// without panicking, also when it refers to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"role:admin", "role:reader and system_scope:all", "(role:member and project_id:%(node.owner)s) or rule:x",
		"not (@ or !)", "'literal':%(a)s", "rule:self", "((((", "and or not", "project_id:%(", "%(x)s:%(y)s", "",
	} {
		f.Add(s)
	}
	creds := []auth.Credentials{
		{},
		{UserID: "u", ProjectID: "p", Roles: []string{"member", "reader"}},
		{UserID: "a", Roles: []string{"admin"}, SystemScope: "all"},
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parse(s)
		if err != nil {
			return
		}
		e, err := New([]Default{{Name: "self", Check: s}}, Options{})
		if err != nil {
			return
		}
		for _, cr := range creds {
			c.allowed(e, map[string]string{"node.owner": "p", "a": "b"}, cr, 0)
			e.Allowed("self", map[string]string{"project_id": "p"}, cr)
		}
	})
}
