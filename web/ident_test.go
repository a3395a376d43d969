package web

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUUIDLike(t *testing.T) {
	const canon = "5ac6f4a3-9f1e-4f5e-8b7c-0d1e2f3a4b5c"
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{canon, true},
		{"5AC6F4A3-9F1E-4F5E-8B7C-0D1E2F3A4B5C", true},
		{"5ac6f4a39f1e4f5e8b7c0d1e2f3a4b5c", true},
		{"{" + canon + "}", true},
		{"urn:uuid:" + canon, true},
		{"5ac6f4a3-9f1e4f5e-8b7c0d1e-2f3a4b5c", true}, // hyphens anywhere, as Python's uuid.UUID
		{"5ac6f4a3-9f1e-4f5e-8b7c-0d1e2f3a4b5", false},
		{"5ac6f4a3-9f1e-4f5e-8b7c-0d1e2f3a4b5g", false},
		{"node-1", false},
		{"", false},
	} {
		u, ok := UUIDLike(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			require.Equal(t, canon, u.String(), tc.in)
		}
	}
}
