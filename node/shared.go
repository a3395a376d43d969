package node

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/metalloc/metalloc/web"
)

// The request-handling rules of Ironic's API that other resources attached
// to nodes (package port) share with the node API: argument parsing, body
// decoding, JSON schema messages and JSON patch application. Errors are
// *Error (turn them into responses with Error.HTTP) or *web.Error.

// PatchOp is one operation of a JSON patch document checked by DecodePatch.
type PatchOp = patchOp

// HTTP returns the client-visible error for e: KindInvalid 400,
// KindConflict 409, KindForbidden 403, KindNotFound 404, KindNotAcceptable
// 406, with e's message.
func (e *Error) HTTP() *web.Error {
	status := http.StatusBadRequest
	switch e.Kind {
	case KindConflict:
		status = http.StatusConflict
	case KindForbidden:
		status = http.StatusForbidden
	case KindNotFound:
		status = http.StatusNotFound
	case KindNotAcceptable:
		status = http.StatusNotAcceptable
	}
	return web.Errorf(status, "%s", e.Message)
}

// DecodePatch checks body (a decoded JSON value) as Ironic's args.patch
// does (a list of add/replace/remove operations on word paths, each but
// remove with a value, at most MaxPatchOps of them: 400 beyond) and returns
// its operations. Which paths a resource lets be patched is the caller's
// check.
func DecodePatch(body any) ([]PatchOp, error) {
	if err := loadSchemas(); err != nil {
		return nil, err
	}
	if l, ok := body.([]any); ok && len(l) > MaxPatchOps {
		return nil, invalidf("Schema error for patch: %d operations is too many; a patch may have at most %d", len(l), MaxPatchOps)
	}
	if err := validateSchema(patchSchema, "patch", body); err != nil {
		return nil, err
	}
	var ops []PatchOp
	for _, item := range body.([]any) {
		m := item.(map[string]any)
		op := patchOp{Op: m["op"].(string), Path: m["path"].(string), Value: m["value"], raw: m}
		if _, ok := m["value"]; !ok && op.Op != "remove" {
			return nil, invalidf("Couldn't apply patch '%s'. Reason: The operation does not contain a 'value' member",
				web.PyRepr(m))
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// ApplyPatch applies ops to a copy of doc as Ironic's apply_jsonpatch does
// (adding a new root attribute is refused; a failing operation is named),
// in time linear in their sizes, and stops with ctx's error once ctx is
// done.
func ApplyPatch(ctx context.Context, doc map[string]any, ops []PatchOp) (map[string]any, error) {
	return applyPatch(ctx, doc, ops)
}

// PatchValues is api_utils.get_patch_values: the values of the non-remove
// operations on exactly path.
func PatchValues(ops []PatchOp, path string) []any { return patchValues(ops, path) }

// ValidateSchema checks doc against sch with Ironic's 400 message
// ("Schema error for <name>: ...", worded as python-jsonschema words it).
func ValidateSchema(sch *jsonschema.Schema, name string, doc any) error {
	return validateSchema(sch, name, doc)
}

// ParseBool is Ironic's args.boolean (400 naming name for anything else).
func ParseBool(name string, v any) (bool, error) { return parseBool(name, v) }

// CheckArgs is 400 "Unexpected arguments: ..." for query parameters (and
// body keys) outside allowed.
func CheckArgs(c echo.Context, body map[string]any, allowed ...string) error {
	return checkArgs(c, body, allowed...)
}

// ReadBody decodes the JSON request body (nil when empty; 400 when it is
// not JSON).
func ReadBody(c echo.Context) (any, error) { return readBody(c) }

// ReadPatch reads the request body as a JSON patch: ReadBody, then
// DecodePatch (Ironic's messages for a body that is not one). The
// resource's handler then checks which paths it may change.
func ReadPatch(c echo.Context) ([]PatchOp, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, err
	}
	return DecodePatch(body)
}

// NotAcceptable is Ironic's bare 406 "Request not acceptable.".
func NotAcceptable() *Error { return notAcceptable() }

// MaskSecrets returns m with the values of keys that look secret replaced
// by "******", recursively, as Ironic's strutils.mask_dict_password shows
// driver_info and deploy step arguments.
func MaskSecrets(m map[string]any) map[string]any { return maskSecrets(m) }
