package web

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
)

// JSONSerializer is echo's JSON codec without HTML escaping, so that "&" in
// `next` links reads as in OpenStack services rather than "\u0026".
type JSONSerializer struct{}

// Serialize writes i as JSON.
func (JSONSerializer) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}

// Deserialize reads the request body into i; malformed JSON is a 400.
func (JSONSerializer) Deserialize(c echo.Context, i any) error {
	err := json.NewDecoder(c.Request().Body).Decode(i)
	if err != nil {
		return Errorf(http.StatusBadRequest, "Invalid JSON in request body: %s", JSONProblem(err))
	}
	return nil
}

var _ echo.JSONSerializer = JSONSerializer{}
