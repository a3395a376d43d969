package node

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// Argument checks with Ironic's messages (ironic/common/args.py and
// api/controllers/v1/utils.py).

var (
	// conductorGroupRE is what a conductor group may contain.
	conductorGroupRE = regexp.MustCompile(`^[a-zA-Z0-9_\-.]*$`)
)

// reservedNames cannot be node names: they are path words under /v1/nodes.
var reservedNames = []string{"maintenance", "management", "states", "vendor_passthru", "detail", "validate"}

// isUUIDLike reports whether s is uuid-like (web.UUIDLike).
func isUUIDLike(s string) bool {
	_, ok := web.UUIDLike(s)
	return ok
}

// isValidLogicalName is utils.is_valid_logical_name (the current rule).
func isValidLogicalName(s string) bool { return web.ValidLogicalName(s, web.IronicMaxVersion) }

// validNameAt reports whether name is a valid logical name at version v.
func validNameAt(v web.Version, name string) bool { return web.ValidLogicalName(name, v) }

// checkNodeName is NodesController._check_names_acceptable for one value
// (which may be any JSON value from a body or patch); errFormat has one %s.
func checkNodeName(v web.Version, value any, errFormat string) error {
	if !v.AtLeast(1, 5) {
		return notAcceptable()
	}
	name, ok := value.(string)
	if !ok || !validNameAt(v, name) || isUUIDLike(name) {
		shown := pyReprPlain(value)
		return invalidf(errFormat, shown)
	}
	if slices.Contains(reservedNames, name) {
		return invalidf("The word \"%s\" is reserved and can not be used as a node name. Reserved words are: %s.",
			name, strings.Join(reservedNames, ", "))
	}
	return nil
}

// pyReprPlain is Python's str() of a value (strings unquoted).
func pyReprPlain(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return web.PyRepr(v)
}

// parseBool is args.boolean (web.ParseBool) as a node error.
func parseBool(name string, v any) (bool, error) {
	b, err := web.ParseBool(name, v)
	if err != nil {
		return false, invalidf("%s", err.(*web.Error).Message)
	}
	return b, nil
}

// parseUUIDArg is args.uuid.
func parseUUIDArg(name string, v any) (uuid.UUID, error) {
	s, ok := v.(string)
	if ok {
		if u, err := uuid.Parse(s); err == nil {
			return u, nil
		}
	}
	return uuid.Nil, invalidf("Expected UUID for %s: %s", name, pyReprPlain(v))
}

// checkArgs rejects query parameters (and body keys, given as extra)
// outside allowed, as args.validate does for unexpected keyword arguments
// (web.CheckArgs, as a node error).
func checkArgs(c echo.Context, body map[string]any, allowed ...string) error {
	if err := web.CheckArgs(c, body, allowed...); err != nil {
		return invalidf("%s", err.(*web.Error).Message)
	}
	return nil
}

// minVersion is Ironic's 406 for a parameter newer than the request.
func minVersion(v web.Version, minor int) error {
	if v.AtLeast(1, minor) {
		return nil
	}
	return &Error{Kind: KindNotAcceptable,
		Message: fmt.Sprintf("Request not acceptable. The minimal required API version should be 1.%d", minor)}
}

// apiError maps node errors to client-visible *web.Error: ErrNotFound to
// Ironic's 404 for ident, *Error by kind. Other errors pass through (the
// error handler turns them into 500/503 without internals).
func apiError(err error, ident string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) {
		return web.NotFound("Node %s could not be found.", ident)
	}
	var e *Error
	if errors.As(err, &e) {
		return e.HTTP()
	}
	return err
}
