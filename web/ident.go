package web

import (
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
)

// UUIDLike reads ident the way Ironic tells a uuid from a name
// (oslo_utils.uuidutils.is_uuid_like, used by get_rpc_node and
// get_rpc_allocation): after dropping "urn:" and "uuid:", surrounding braces
// and every hyphen, 32 hexadecimal digits in any case are a uuid. It returns
// the uuid and true, or false when ident is to be taken as a name. This is
// the one identifier parser of the node and allocation APIs.
func UUIDLike(ident string) (uuid.UUID, bool) {
	s := strings.ReplaceAll(ident, "urn:", "")
	s = strings.ReplaceAll(s, "uuid:", "")
	s = strings.Trim(s, "{}")
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 {
		return uuid.Nil, false
	}
	u, err := uuid.Parse(s)
	return u, err == nil
}

// PathIdent returns the "ident" path parameter of c percent-decoded, the
// identifier the node and allocation routes check (Ironic decodes the path
// once before routing).
func PathIdent(c echo.Context) string {
	ident := c.Param("ident")
	if u, err := url.PathUnescape(ident); err == nil {
		ident = u
	}
	return ident
}
