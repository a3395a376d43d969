package webtest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// IronicFault returns the faultstring of an Ironic error body (decoded
// JSON: {"error_message": "<JSON with faultstring>"}), failing t when body
// is not one.
func IronicFault(t testing.TB, body map[string]any) string {
	t.Helper()
	em, ok := body["error_message"].(string)
	require.True(t, ok, "no error_message in %v", body)
	var inner struct {
		Faultstring string `json:"faultstring"`
	}
	require.NoError(t, json.Unmarshal([]byte(em), &inner))
	return inner.Faultstring
}
