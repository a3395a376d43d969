package deploytemplate_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/deploytemplate"
	"github.com/metalloc/metalloc/web/ironictest"
)

const steps = `[{"interface":"bios","step":"apply_configuration","args":{"settings":[{"name":"LogicalProc","value":"Enabled"}],"password":"x"},"priority":150}]`

// TestDeployTemplates goes through a template's life as Ironic 21.4
// answers it: the 1.55 gate, create (trait names, steps, duplicates),
// show by uuid and name with masked secrets, list, patch, delete.
func TestDeployTemplates(t *testing.T) {
	t.Parallel()
	s := ironictest.NewIronic(t, deploytemplate.NewHandler(deploytemplate.NewStore(dbtest.New(t)),
		deploytemplate.HandlerOptions{PublicEndpoint: ironictest.Base, MaxLimit: 100}).Register)
	require.Equal(t, "The API version does not allow deploy templates", s.Must(http.StatusNotFound, http.MethodGet, "/v1/deploy_templates", "1.54", nil).Fault(t))
	s.Must(http.StatusMethodNotAllowed, http.MethodPost, "/v1/deploy_templates", "1.54", `{}`)

	r := s.Must(http.StatusCreated, http.MethodPost, "/v1/deploy_templates", "1.55",
		`{"name":"CUSTOM_DT1","steps":`+steps+`,"extra":{"a":1},"description":"dropped"}`)
	id := r.Body["uuid"].(string)
	require.Equal(t, ironictest.Base+"/v1/deploy_templates/"+id, r.Header.Get("Location"))
	require.NotContains(t, r.Body, "description")
	step := r.Body["steps"].([]any)[0].(map[string]any)
	require.Equal(t, "******", step["args"].(map[string]any)["password"])
	require.Equal(t, 150.0, step["priority"])
	p := s.Must(http.StatusCreated, http.MethodPost, "/v1/deploy_templates", "1.82",
		`{"name":"HW_CPU_X86_AVX","steps":[{"interface":"raid","step":"x","args":{},"priority":"20"}]}`).Body
	require.Equal(t, 20.0, p["steps"].([]any)[0].(map[string]any)["priority"], "a priority given as digits is stored as a number")

	for body, want := range map[string]string{
		`{"name":"CUSTOM_DT1","steps":` + steps + `}`:                   "A deploy template with name CUSTOM_DT1 already exists.",
		`{"name":"CUSTOM_X","steps":` + steps + `,"uuid":"` + id + `"}`: "A deploy template with UUID " + id + " already exists.",
	} {
		require.Equal(t, want, s.Must(http.StatusConflict, http.MethodPost, "/v1/deploy_templates", "1.82", body).Fault(t))
	}
	for body, want := range map[string]string{
		`{"name":"foo","steps":` + steps + `}`:        "Schema error for template: 'foo' is not valid under any of the given schemas. Possible root cause: 'foo' does not match '^CUSTOM_[A-Z0-9_]+$'",
		`{"name":"not/a/name","steps":` + steps + `}`: "does not match",
		`{"name":"CUSTOM_X","steps":[]}`:              "Schema error for template: [] is too short",
		``:                                            "Schema error for template: 'steps' is a required property",
		`{"name":"CUSTOM_X","steps":` + steps + `,"uuid":"nope"}`:                                                                                     "Expected UUID for uuid: nope",
		`{"name":"CUSTOM_X","steps":[{"interface":"bios","step":"a","args":{},"priority":1},{"interface":"bios","step":"a","args":{},"priority":2}]}`: "Deploy template invalid: Duplicate deploy steps. A deploy template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: bios, step: a.",
		`{"name":"CUSTOM_X","steps":[{"interface":"boot","step":"a","args":{},"priority":1}]}`:                                                        "Schema error for template: 'boot' is not one of ['power', 'management', 'deploy', 'bios', 'raid']",
	} {
		require.Contains(t, s.Must(http.StatusBadRequest, http.MethodPost, "/v1/deploy_templates", "1.82", body).Fault(t), want, body)
	}

	require.Equal(t, id, s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates/CUSTOM_DT1", "1.82", nil).Body["uuid"])
	r = s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates/"+id+"?fields=name,steps", "1.82", nil)
	require.Len(t, r.Body, 3)
	require.Equal(t, "Deploy template CUSTOM_NOPE could not be found.", s.Must(http.StatusNotFound, http.MethodGet, "/v1/deploy_templates/CUSTOM_NOPE", "1.82", nil).Fault(t))
	require.Equal(t, "Expected UUID or name for template_ident: a b", s.Must(http.StatusBadRequest, http.MethodGet, "/v1/deploy_templates/a%20b", "1.82", nil).Fault(t))

	list := s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates", "1.82", nil).Body["deploy_templates"].([]any)
	require.Len(t, list, 2)
	require.Len(t, list[0], 3, "uuid, name and links by default")
	detail := s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates?detail=true&sort_key=name&sort_dir=desc", "1.82", nil).Body["deploy_templates"].([]any)
	require.Equal(t, "HW_CPU_X86_AVX", detail[0].(map[string]any)["name"])
	require.Contains(t, detail[0], "steps")
	page := s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates?limit=1", "1.82", nil).Body
	require.Equal(t, ironictest.Base+"/v1/deploy_templates?limit=1&marker="+id, page["next"])
	require.Len(t, s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates?marker="+id, "1.82", nil).Body["deploy_templates"], 1)
	for q, want := range map[string]string{
		"sort_key=steps": "The sort_key value steps is an invalid field for sorting",
		"marker=a%20b":   "Expected name for marker: a b",
	} {
		require.Equal(t, want, s.Must(http.StatusBadRequest, http.MethodGet, "/v1/deploy_templates?"+q, "1.82", nil).Fault(t))
	}
	require.Equal(t, "Deploy template foo could not be found.", s.Must(http.StatusNotFound, http.MethodGet, "/v1/deploy_templates?marker=foo", "1.82", nil).Fault(t))

	r = s.Must(http.StatusOK, http.MethodPatch, "/v1/deploy_templates/CUSTOM_DT1", "1.82",
		`[{"op":"replace","path":"/name","value":"CUSTOM_DT2"},{"op":"replace","path":"/steps/0/priority","value":"20"},{"op":"add","path":"/extra/b","value":2}]`)
	require.Equal(t, "CUSTOM_DT2", r.Body["name"])
	require.Equal(t, 20.0, r.Body["steps"].([]any)[0].(map[string]any)["priority"])
	require.Equal(t, 2.0, s.Must(http.StatusOK, http.MethodGet, "/v1/deploy_templates/CUSTOM_DT2", "1.82", nil).Body["extra"].(map[string]any)["b"])
	require.Equal(t, "Cannot patch /uuid. Only the following can be updated: extra, name, steps, description",
		s.Must(http.StatusBadRequest, http.MethodPatch, "/v1/deploy_templates/"+id, "1.82", `[{"op":"replace","path":"/uuid","value":"`+uuid.NewString()+`"}]`).Fault(t))
	require.Equal(t, "Schema error for patch: 'step' is a required property",
		s.Must(http.StatusBadRequest, http.MethodPatch, "/v1/deploy_templates/"+id, "1.82", `[{"op":"remove","path":"/steps/0/step"}]`).Fault(t))
	require.Equal(t, "A deploy template with name HW_CPU_X86_AVX already exists.",
		s.Must(http.StatusConflict, http.MethodPatch, "/v1/deploy_templates/"+id, "1.82", `[{"op":"replace","path":"/name","value":"HW_CPU_X86_AVX"}]`).Fault(t))

	s.Must(http.StatusNoContent, http.MethodDelete, "/v1/deploy_templates/CUSTOM_DT2", "1.82", nil)
	s.Must(http.StatusNotFound, http.MethodDelete, "/v1/deploy_templates/CUSTOM_DT2", "1.82", nil)
}
