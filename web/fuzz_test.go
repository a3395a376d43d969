package web

import "testing"

// FuzzParseVersion: microversion headers of any shape parse or are
// refused, never panic, and what parses prints back to an equal version.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.82", "latest", "1.", ".1", "1.-1", "01.002", "9999999999999999999.1", "1.1.1", " 1.2", "placement 1.39"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := ParseVersion(s, IronicMaxVersion)
		if !ok {
			return
		}
		if w, ok := ParseVersion(v.String(), IronicMaxVersion); !ok || w != v {
			t.Fatalf("%q parsed as %v, which reparses as %v, %v", s, v, w, ok)
		}
	})
}
