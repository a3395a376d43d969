package chassis_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/chassis"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web/ironictest"
)

// setup serves the chassis API and node's (for chassis_uuid and
// /chassis/{uuid}/nodes) on a fresh database.
func setup(t *testing.T) *ironictest.Ironic {
	t.Helper()
	pool := dbtest.New(t)
	return ironictest.NewIronic(t,
		chassis.NewHandler(chassis.NewStore(pool), chassis.HandlerOptions{PublicEndpoint: ironictest.Base, MaxLimit: 100}).Register,
		node.NewHandler(node.NewStore(pool), nil, node.HandlerOptions{PublicEndpoint: ironictest.Base, MaxLimit: 100}).Register)
}

// TestChassis goes through a chassis' life as Ironic 21.4 answers it:
// create, show (with fields), list (default fields, detail, paging,
// sorting), patch, nodes naming it, delete refused while they do.
func TestChassis(t *testing.T) {
	t.Parallel()
	s := setup(t)
	r := s.Must(http.StatusCreated, http.MethodPost, "/v1/chassis", "1.82", map[string]any{"description": "rack 1", "extra": map[string]any{"a": 1}})
	id := r.Body["uuid"].(string)
	require.Equal(t, ironictest.Base+"/v1/chassis/"+id, r.Header.Get("Location"))
	require.Equal(t, "rack 1", r.Body["description"])
	require.Equal(t, []any{[]any{
		map[string]any{"href": ironictest.Base + "/v1/chassis/" + id + "/nodes", "rel": "self"},
		map[string]any{"href": ironictest.Base + "/chassis/" + id + "/nodes", "rel": "bookmark"},
	}}, r.Body["nodes"], "nodes is a list holding the links, as Ironic 21.4 shows it")
	empty := s.Must(http.StatusCreated, http.MethodPost, "/v1/chassis", "1.82", nil).Body
	require.Nil(t, empty["description"])
	require.Equal(t, map[string]any{}, empty["extra"])

	r = s.Must(http.StatusOK, http.MethodGet, "/v1/chassis/"+id+"?fields=uuid,extra", "1.82", nil)
	require.ElementsMatch(t, []string{"uuid", "extra", "links"}, keys(r.Body))
	require.Equal(t, `Field(s) "bogus" are not valid`, s.Must(http.StatusBadRequest, http.MethodGet, "/v1/chassis/"+id+"?fields=bogus", "1.82", nil).Fault(t))
	s.Must(http.StatusNotAcceptable, http.MethodGet, "/v1/chassis/"+id+"?fields=uuid", "1.7", nil)

	list := s.Must(http.StatusOK, http.MethodGet, "/v1/chassis", "1.82", nil).Body["chassis"].([]any)
	require.Len(t, list, 2)
	require.ElementsMatch(t, []string{"uuid", "description", "links"}, keys(list[0].(map[string]any)))
	detail := s.Must(http.StatusOK, http.MethodGet, "/v1/chassis?detail=true", "1.82", nil).Body["chassis"].([]any)
	require.Contains(t, detail[0], "extra")
	require.Equal(t, "Invalid query parameter ?detail=True received.",
		s.Must(http.StatusBadRequest, http.MethodGet, "/v1/chassis?detail=True", "1.42", nil).Fault(t))
	require.Equal(t, "Unexpected arguments: fields", s.Must(http.StatusBadRequest, http.MethodGet, "/v1/chassis/detail?fields=uuid", "1.82", nil).Fault(t))
	page := s.Must(http.StatusOK, http.MethodGet, "/v1/chassis?limit=1&sort_key=created_at", "1.82", nil).Body
	require.Len(t, page["chassis"], 1)
	require.Equal(t, ironictest.Base+"/v1/chassis?sort_key=created_at&limit=1&marker="+id, page["next"])
	page = s.Must(http.StatusOK, http.MethodGet, "/v1/chassis?limit=1&sort_key=created_at&marker="+id, "1.82", nil).Body
	require.Equal(t, empty["uuid"], page["chassis"].([]any)[0].(map[string]any)["uuid"])
	for q, want := range map[string]string{
		"sort_key=extra":       "The sort_key value extra is an invalid field for sorting",
		"sort_key=foo":         `The sort_key value "foo" is an invalid field for sorting`,
		"marker=nope":          "Expected UUID for marker: nope",
		"limit=x":              "Expected an integer for limit: x",
		"detail=maybe":         "Invalid detail: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'",
		"x=1":                  "Unexpected arguments: x",
		"fields=uuid&detail=1": "Can not specify ?detail=True and fields in the same request.",
	} {
		require.Equal(t, want, s.Must(http.StatusBadRequest, http.MethodGet, "/v1/chassis?"+q, "1.82", nil).Fault(t), q)
	}
	s.Must(http.StatusNotFound, http.MethodGet, "/v1/chassis?marker="+uuid.NewString(), "1.82", nil)

	for body, want := range map[string]string{
		`{"description":"` + strings.Repeat("x", 256) + `"}`: "Schema error for chassis: '" + strings.Repeat("x", 256) + "' is too long",
		`{"bogus":1}`:     "Schema error for chassis: Additional properties are not allowed ('bogus' was unexpected)",
		`{"uuid":"nope"}`: "Expected UUID for uuid: nope",
	} {
		require.Equal(t, want, s.Must(http.StatusBadRequest, http.MethodPost, "/v1/chassis", "1.82", body).Fault(t))
	}
	require.Equal(t, "A chassis with UUID "+id+" already exists.",
		s.Must(http.StatusConflict, http.MethodPost, "/v1/chassis", "1.82", map[string]any{"uuid": id}).Fault(t))

	r = s.Must(http.StatusOK, http.MethodPatch, "/v1/chassis/"+id, "1.82", `[{"op":"add","path":"/extra/foo","value":"bar"},{"op":"remove","path":"/description"}]`)
	require.Equal(t, map[string]any{"a": 1.0, "foo": "bar"}, r.Body["extra"])
	require.Nil(t, r.Body["description"])
	require.NotNil(t, r.Body["updated_at"])
	require.Equal(t, "Cannot patch /created_at. Only the following can be updated: uuid, extra, description",
		s.Must(http.StatusBadRequest, http.MethodPatch, "/v1/chassis/"+id, "1.82", `[{"op":"replace","path":"/created_at","value":"x"}]`).Fault(t))
	require.Equal(t, "Expected UUID for uuid: bar",
		s.Must(http.StatusBadRequest, http.MethodPatch, "/v1/chassis/"+id, "1.82", `[{"op":"replace","path":"/uuid","value":"bar"}]`).Fault(t))
	require.Equal(t, "Chassis foo could not be found.",
		s.Must(http.StatusNotFound, http.MethodPatch, "/v1/chassis/foo", "1.82", `[{"op":"add","path":"/extra/x","value":"y"}]`).Fault(t))

	// Nodes name the chassis; it cannot go while they do.
	n := s.Must(http.StatusCreated, http.MethodPost, "/v1/nodes", "1.82", map[string]any{"driver": "fake-hardware", "chassis_uuid": id}).Body
	require.Equal(t, id, n["chassis_uuid"])
	missing := uuid.NewString()
	require.Equal(t, "Chassis "+missing+" could not be found.",
		s.Must(http.StatusBadRequest, http.MethodPost, "/v1/nodes", "1.82", map[string]any{"driver": "fake-hardware", "chassis_uuid": missing}).Fault(t))
	nodes := s.Must(http.StatusOK, http.MethodGet, "/v1/chassis/"+id+"/nodes", "1.82", nil).Body["nodes"].([]any)
	require.Len(t, nodes, 1)
	require.Equal(t, n["uuid"], nodes[0].(map[string]any)["uuid"])
	require.Len(t, s.Must(http.StatusOK, http.MethodGet, "/v1/nodes?chassis_uuid="+id, "1.82", nil).Body["nodes"], 1)
	require.Len(t, s.Must(http.StatusOK, http.MethodGet, "/v1/chassis/"+empty["uuid"].(string)+"/nodes/detail", "1.82", nil).Body["nodes"], 0)
	require.Equal(t, "Expected UUID for chassis_uuid: foo", s.Must(http.StatusBadRequest, http.MethodGet, "/v1/chassis/foo/nodes", "1.82", nil).Fault(t))
	require.Equal(t, "Chassis "+missing+" could not be found.", s.Must(http.StatusNotFound, http.MethodGet, "/v1/chassis/"+missing+"/nodes", "1.82", nil).Fault(t))
	require.Equal(t, "Cannot complete the requested action because chassis "+id+" contains nodes.",
		s.Must(http.StatusBadRequest, http.MethodDelete, "/v1/chassis/"+id, "1.82", nil).Fault(t))

	// A node leaves the chassis (from 1.25) or moves to another.
	nodeID := n["uuid"].(string)
	s.Must(http.StatusNotAcceptable, http.MethodPatch, "/v1/nodes/"+nodeID, "1.24", `[{"op":"remove","path":"/chassis_uuid"}]`)
	r = s.Must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+nodeID, "1.82", `[{"op":"replace","path":"/chassis_uuid","value":"`+empty["uuid"].(string)+`"}]`)
	require.Equal(t, empty["uuid"], r.Body["chassis_uuid"])
	s.Must(http.StatusNoContent, http.MethodDelete, "/v1/chassis/"+id, "1.82", nil)
	s.Must(http.StatusNotFound, http.MethodGet, "/v1/chassis/"+id, "1.82", nil)
	require.Equal(t, "Expected UUID for chassis_uuid: foo", s.Must(http.StatusBadRequest, http.MethodDelete, "/v1/chassis/foo", "1.82", nil).Fault(t))
	r = s.Must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+nodeID, "1.82", `[{"op":"remove","path":"/chassis_uuid"}]`)
	require.Nil(t, r.Body["chassis_uuid"])
}

// TestChassisDeleteRacesNodes races deleting a chassis against creating
// nodes in it: either the chassis goes and every node creation that did not
// see it is refused with 400, or it stays with the nodes that named it; no
// node ever names a deleted chassis.
func TestChassisDeleteRacesNodes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for round := range 10 {
		id := s.Must(http.StatusCreated, http.MethodPost, "/v1/chassis", "1.82", nil).Body["uuid"].(string)
		var wg sync.WaitGroup
		statuses := make([]int, 4)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = s.Do(http.MethodPost, "/v1/nodes", "1.82", map[string]any{"driver": "fake-hardware", "chassis_uuid": id}).Status
			}()
		}
		del := s.Do(http.MethodDelete, "/v1/chassis/"+id, "1.82", nil).Status
		wg.Wait()
		created := 0
		for _, st := range statuses {
			require.Contains(t, []int{http.StatusCreated, http.StatusBadRequest}, st)
			if st == http.StatusCreated {
				created++
			}
		}
		if del == http.StatusNoContent {
			require.Zero(t, created, "round %d: nodes created in a chassis that was deleted", round)
			continue
		}
		require.Equal(t, http.StatusBadRequest, del, "round %d", round)
		listed := len(s.Must(http.StatusOK, http.MethodGet, "/v1/nodes?chassis_uuid="+id, "1.82", nil).Body["nodes"].([]any))
		require.Equal(t, created, listed, "round %d", round)
		require.NotZero(t, created, "round %d", round)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
