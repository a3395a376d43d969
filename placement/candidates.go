package placement

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/placement/candidate"
	"github.com/metalloc/metalloc/web"
)

// GET /allocation_candidates (microversions 1.10 to 1.39), as Placement 8.0's
// list_allocation_candidates: this file parses and validates the request
// (schemas per microversion, request groups, request-wide parameters);
// package placement/candidate finds the candidates and writes the response.

// registerCandidates adds the routes of allocation candidates.
func (h *Handler) registerCandidates(g *echo.Group) {
	g.GET("/allocation_candidates", h.can(ruleCandidatesList, h.listAllocationCandidates))
}

func (h *Handler) randomizeCandidates() bool { return h.randomize.Load() }

var (
	candKeyPattern     = regexp.MustCompile(`^(resources|required|member_of|in_tree)([1-9][0-9]*)?$`)
	candKeyPattern133  = regexp.MustCompile(`^(resources|required|member_of|in_tree)([a-zA-Z0-9_-]{1,64})?$`)
	candLimitPattern   = regexp.MustCompile(`^[1-9][0-9]*$`)
	candGroupPat       = `[1-9][0-9]*`
	candGroupPat133    = `[a-zA-Z0-9_-]{1,64}`
	candGroupedPrefixs = []string{"resources", "required", "member_of", "in_tree"}
)

// candQueryItem is one key=value of the query string, in order.
type candQueryItem struct{ key, value string }

// candQueryItems splits the raw query keeping the order of the parameters
// (Go's url.Values does not), as webob's req.GET.items().
func candQueryItems(raw string) []candQueryItem {
	var out []candQueryItem
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		uk, err := url.QueryUnescape(k)
		if err != nil {
			uk = k
		}
		uv, err := url.QueryUnescape(v)
		if err != nil {
			uv = v
		}
		out = append(out, candQueryItem{uk, uv})
	}
	return out
}

// candValidateSchema is the query schema of the microversion (Placement's
// GET_SCHEMA_1_10 ... GET_SCHEMA_1_36), checked on the last value of each
// parameter as jsonschema sees dict(req.GET).
func candValidateSchema(q url.Values, v web.Version) error {
	props := []string{}
	var patterns []string
	grouped := false
	if v.AtLeast(1, 25) {
		grouped = true
		props = append(props, "group_policy")
		prefixes := []string{"resources", "required", "member_of"}
		if v.AtLeast(1, 31) {
			prefixes = candGroupedPrefixs
		}
		pat := candGroupPat
		if v.AtLeast(1, 33) {
			pat = candGroupPat133
		}
		for _, p := range prefixes {
			patterns = append(patterns, "^"+p+"("+pat+")?$")
		}
		sort.Strings(patterns)
	} else {
		props = append(props, "resources")
		if v.AtLeast(1, 17) {
			props = append(props, "required")
		}
		if v.AtLeast(1, 21) {
			props = append(props, "member_of")
		}
	}
	if v.AtLeast(1, 16) {
		props = append(props, "limit")
	}
	if v.AtLeast(1, 35) {
		props = append(props, "root_required")
	}
	if v.AtLeast(1, 36) {
		props = append(props, "same_subtree")
	}
	var extra []string
	for k := range q {
		if contains(props, k) {
			continue
		}
		matched := false
		if grouped {
			m := candKeyPattern.FindStringSubmatch(k)
			if v.AtLeast(1, 33) {
				m = candKeyPattern133.FindStringSubmatch(k)
			}
			if m != nil && (m[1] != "in_tree" || v.AtLeast(1, 31)) {
				matched = true
			}
		}
		if !matched {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		quoted := make([]string, len(extra))
		for i, e := range extra {
			quoted[i] = web.PyRepr(e)
		}
		if grouped {
			verb := "does"
			if len(extra) > 1 {
				verb = "do"
			}
			qp := make([]string, len(patterns))
			for i, p := range patterns {
				qp[i] = web.PyRepr(p)
			}
			return badQuery("%s %s not match any of the regexes: %s", strings.Join(quoted, ", "), verb, strings.Join(qp, ", "))
		}
		verb := "was"
		if len(extra) > 1 {
			verb = "were"
		}
		return badQuery("Additional properties are not allowed (%s %s unexpected)", strings.Join(quoted, ", "), verb)
	}
	if !grouped {
		if _, ok := q["resources"]; !ok {
			return badQuery("'resources' is a required property")
		}
	}
	if _, ok := q["limit"]; ok {
		if l := lastValue(q, "limit"); !candLimitPattern.MatchString(l) {
			return badLimit(l)
		}
	}
	if _, ok := q["group_policy"]; ok {
		if gp := lastValue(q, "group_policy"); gp != "none" && gp != "isolate" {
			return badQueryValue(web.PyRepr(gp)+" is not one of ['none', 'isolate']", "enum", "group_policy",
				map[string]any{"type": "string", "enum": []any{"none", "isolate"}}, gp)
		}
	}
	return nil
}

// parseCandRequest is Placement's RequestWideParams.from_request and
// RequestGroup.dict_from_request with their checks, at microversion v.
func parseCandRequest(raw string, v web.Version) (*candidate.Request, error) {
	q, _ := url.ParseQuery(raw)
	items := candQueryItems(raw)
	if err := candValidateSchema(q, v); err != nil {
		return nil, err
	}
	r := &candidate.Request{}
	// Request-wide parameters.
	if vals := q["limit"]; len(vals) > 0 {
		n, err := strconv.Atoi(vals[0])
		switch {
		case errors.Is(err, strconv.ErrRange) && candLimitPattern.MatchString(vals[0]):
			// More digits than an int holds: Placement's Python int takes
			// any, and a limit above the number of candidates limits
			// nothing (200, every candidate): no limit.
		case err != nil || n < 1:
			return nil, badLimit(vals[0])
		default:
			r.Limit = n
		}
	}
	if vals := q["group_policy"]; len(vals) > 0 {
		r.GroupPolicy = vals[0]
	}
	if vals := q["root_required"]; len(vals) > 0 {
		if len(vals) > 1 {
			return nil, web.PlacementErr(http.StatusBadRequest, web.PlacementCodeDuplicateQueryParam,
				"Query parameter 'root_required' may be specified only once.")
		}
		req, forb, err := parseRequiredValue(vals[0], true, false)
		if err != nil {
			return nil, err
		}
		for _, set := range req {
			r.RootRequired = appendUnique(r.RootRequired, set[0])
		}
		r.RootForbidden = forb
		var conflicts []string
		for _, t := range r.RootForbidden {
			if contains(r.RootRequired, t) {
				conflicts = append(conflicts, t)
			}
		}
		if len(conflicts) > 0 {
			return nil, web.PlacementErr(http.StatusBadRequest, web.PlacementCodeQueryParamBadValue,
				"Conflicting required and forbidden traits found in root_required: %s", strings.Join(conflicts, ", "))
		}
	}
	for _, val := range q["same_subtree"] {
		var set []string
		for _, s := range strings.Split(val, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				return nil, web.PlacementErr(http.StatusBadRequest, web.PlacementCodeQueryParamBadValue,
					"Empty string (unsuffixed group) can not be specified in `same_subtree` ")
			}
			set = appendUnique(set, s)
		}
		r.SameSubtrees = append(r.SameSubtrees, set)
	}

	// Request groups, in order of their first key in the query.
	pattern := candKeyPattern
	if v.AtLeast(1, 33) {
		pattern = candKeyPattern133
	}
	bySuffix := map[string]*candidate.Group{}
	for _, it := range items {
		m := pattern.FindStringSubmatch(it.key)
		if m == nil {
			continue
		}
		prefix, suffix := m[1], m[2]
		g := bySuffix[suffix]
		if g == nil {
			g = &candidate.Group{Suffix: suffix, SameProvider: suffix != ""}
			bySuffix[suffix] = g
			r.Groups = append(r.Groups, g)
		}
		var err error
		switch prefix {
		case "resources":
			g.HasResourcesKey = true
			g.Resources, err = parseResources(it.value)
		case "required":
			g.Required, g.Forbidden, err = parseRequiredParams(q["required"+suffix], v)
		case "member_of":
			g.MemberOf, g.ForbiddenAggs, err = parseMemberOfParams(q["member_of"+suffix], suffix, v)
		case "in_tree":
			s := strings.TrimSpace(it.value)
			id, perr := uuid.Parse(s)
			if perr != nil {
				err = badQuery("Expected 'in_tree' parameter to be a format of uuid. Got: %s", it.value)
			} else {
				g.InTree = &id
			}
		}
		if err != nil {
			return nil, err
		}
	}

	if v.AtLeast(1, 36) {
		var resourceless []string
		for _, g := range r.Groups {
			if len(g.Resources) == 0 {
				resourceless = append(resourceless, g.Suffix)
			}
		}
		if len(resourceless) == len(r.Groups) {
			return nil, web.PlacementErr(http.StatusBadRequest, web.PlacementCodeQueryParamMissingVal,
				"There must be at least one resources or resources[$S] parameter.")
		}
		inSubtree := map[string]bool{}
		for _, set := range r.SameSubtrees {
			for _, s := range set {
				inSubtree[s] = true
			}
		}
		var bad []string
		for _, s := range resourceless {
			if !inSubtree[s] {
				bad = append(bad, s)
			}
		}
		if len(bad) > 0 {
			return nil, web.PlacementErr(http.StatusBadRequest, web.PlacementCodeQueryParamBadValue,
				"Resourceless suffixed group request should be specified in `same_subtree` query param: bad group(s) - %s.", pyList(bad))
		}
		bad = nil
		for _, set := range r.SameSubtrees {
			for _, s := range set {
				if bySuffix[s] == nil && !contains(bad, s) {
					bad = append(bad, s)
				}
			}
		}
		if len(bad) > 0 {
			var all []string
			for _, g := range r.Groups {
				all = append(all, g.Suffix)
			}
			return nil, web.PlacementErr(http.StatusBadRequest, web.PlacementCodeQueryParamBadValue,
				"Real suffixes should be specified in `same_subtree`: %s not found in %s.", pyList(bad), pyList(all))
		}
	} else {
		var orphans []string
		for _, g := range r.Groups {
			if len(g.Required) > 0 && len(g.Resources) == 0 {
				orphans = append(orphans, "required"+g.Suffix)
			}
		}
		if len(orphans) > 0 {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"All traits parameters must be associated with resources.  Found the following orphaned traits keys: %s", strings.Join(orphans, ", "))
		}
		for _, g := range r.Groups {
			if len(g.Resources) == 0 && (len(g.MemberOf) > 0 || len(g.ForbiddenAggs) > 0) {
				orphans = append(orphans, "member_of"+g.Suffix)
			}
		}
		if len(orphans) > 0 {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"All member_of parameters must be associated with resources. Found the following orphaned member_of keys: %s", strings.Join(orphans, ", "))
		}
		for _, g := range r.Groups {
			if len(g.Resources) == 0 {
				return nil, web.PlacementErr(http.StatusBadRequest, "", "All request groups must specify resources.")
			}
		}
		if len(r.Groups) == 0 {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"At least one request group (`resources` or `resources{$S}`) is required.")
		}
	}
	if v.AtLeast(1, 22) {
		var conflicts []string
		for _, g := range r.Groups {
			for _, set := range g.Required {
				all := true
				for _, t := range set {
					if !contains(g.Forbidden, t) {
						all = false
					}
				}
				if all {
					s := append([]string(nil), set...)
					sort.Strings(s)
					conflicts = append(conflicts, "required"+g.Suffix+": ("+strings.Join(s, ", ")+")")
				}
			}
		}
		if len(conflicts) > 0 {
			sort.Strings(conflicts)
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"Conflicting required and forbidden traits found in the following traits keys: %s", strings.Join(conflicts, ", "))
		}
	}
	if r.GroupPolicy == "" {
		n := 0
		for _, g := range r.Groups {
			if g.SameProvider {
				n++
			}
		}
		if n > 1 {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				`The "group_policy" parameter is required when specifying more than one "resources{N}" parameter.`)
		}
	}
	return r, nil
}

// parseRequiredParams is Placement's normalize_traits_qs_params for one
// group: only the last value before 1.39; "!" forbidden from 1.22; "in:"
// any-of from 1.39.
func parseRequiredParams(vals []string, v web.Version) ([][]string, []string, error) {
	allowForbidden, allowAny := v.AtLeast(1, 22), v.AtLeast(1, 39)
	if !allowAny && len(vals) > 1 {
		vals = vals[len(vals)-1:]
	}
	var required [][]string
	var forbidden []string
	for _, val := range vals {
		req, forb, err := parseRequiredValue(val, allowForbidden, allowAny)
		if err != nil {
			return nil, nil, err
		}
		required = append(required, req...)
		for _, f := range forb {
			forbidden = appendUnique(forbidden, f)
		}
	}
	return required, forbidden, nil
}

// parseRequiredValue is Placement's normalize_traits_qs_param for one value.
func parseRequiredValue(val string, allowForbidden, allowAny bool) ([][]string, []string, error) {
	if strings.HasPrefix(val, "in:") {
		if !allowAny {
			return nil, nil, badQuery("The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: %s", val)
		}
		var set []string
		for _, t := range strings.Split(val[3:], ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				return nil, nil, badQuery("Expected 'required' parameter value of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: %s", val)
			}
			set = appendUnique(set, t)
		}
		for _, t := range set {
			if strings.HasPrefix(t, "!") {
				return nil, nil, badQuery("The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. Got: %s", val)
			}
		}
		return [][]string{set}, nil, nil
	}
	expected := "HW_CPU_X86_VMX,!CUSTOM_MAGIC"
	if !allowForbidden {
		expected = "HW_CPU_X86_VMX,CUSTOM_MAGIC"
	}
	var required [][]string
	var forbidden []string
	for _, t := range strings.Split(val, ",") {
		t = strings.TrimSpace(t)
		name := strings.TrimLeft(t, "!")
		if t == "" || name == "" {
			return nil, nil, badQuery("Expected 'required' parameter value of the form: %s. Got an empty trait in: %s", expected, val)
		}
		if strings.HasPrefix(t, "!") {
			forbidden = appendUnique(forbidden, name)
		} else {
			required = append(required, []string{t})
		}
	}
	if len(forbidden) > 0 && !allowForbidden {
		return nil, nil, badQuery("Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: %s", val)
	}
	return required, forbidden, nil
}

// parseMemberOfParams is Placement's normalize_member_of_qs_params for one
// group: one value before 1.24, "!" forbidden from 1.32.
func parseMemberOfParams(vals []string, suffix string, v web.Version) ([][]uuid.UUID, []uuid.UUID, error) {
	if !v.AtLeast(1, 24) && len(vals) > 1 {
		return nil, nil, web.PlacementErr(http.StatusBadRequest, "", "Multiple member_of%s parameters are not supported", suffix)
	}
	var required [][]uuid.UUID
	var forbidden []uuid.UUID
	for _, val := range vals {
		if strings.Contains(val, ",") && !strings.HasPrefix(val, "in:") && !strings.HasPrefix(val, "!in:") {
			return nil, nil, web.PlacementErr(http.StatusBadRequest, "",
				"Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion. Got: %s", val)
		}
		var list []string
		neg := false
		switch {
		case strings.HasPrefix(val, "!in:"):
			list, neg = strings.Split(val[4:], ","), true
		case strings.HasPrefix(val, "!"):
			list, neg = []string{val[1:]}, true
		case strings.HasPrefix(val, "in:"):
			list = strings.Split(val[3:], ",")
		default:
			list = []string{val}
		}
		var ids []uuid.UUID
		for _, s := range list {
			id, err := uuid.Parse(s)
			if err != nil {
				return nil, nil, badQuery("Expected 'member_of' parameter to contain valid UUID(s). Got: %s", s)
			}
			ids = append(ids, id)
		}
		if neg {
			if !v.AtLeast(1, 32) {
				return nil, nil, web.PlacementErr(http.StatusBadRequest, "",
					"Forbidden member_of%s parameters are not supported in the specified microversion", suffix)
			}
			for _, id := range ids {
				if !containsUUID(forbidden, id) {
					forbidden = append(forbidden, id)
				}
			}
		} else {
			required = append(required, ids)
		}
	}
	return required, forbidden, nil
}

func appendUnique(list []string, s string) []string {
	if contains(list, s) {
		return list
	}
	return append(list, s)
}

func containsUUID(list []uuid.UUID, id uuid.UUID) bool {
	for _, x := range list {
		if x == id {
			return true
		}
	}
	return false
}

// pyList renders strings as a Python list repr.
func pyList(list []string) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = web.PyRepr(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// listAllocationCandidates is GET /allocation_candidates.
func (h *Handler) listAllocationCandidates(c echo.Context) error {
	v := web.PlacementRequestVersion(c)
	if !v.AtLeast(1, 10) {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	req, err := parseCandRequest(c.Request().URL.RawQuery, v)
	if err != nil {
		return err
	}
	res, err := h.candidates.Find(c.Request().Context(), req, v)
	if err != nil {
		return err
	}
	if v.AtLeast(1, 15) {
		setCacheHeaders(c, nil)
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(http.StatusOK)
	return res.Write(c.Response())
}
