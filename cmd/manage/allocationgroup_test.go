package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllocationGroupCreateWait: create sends the group's body with
// Prefer: wait and turns the answer's state into the exit status.
func TestAllocationGroupCreateWait(t *testing.T) {
	var got map[string]any
	var prefer, path string
	state := "error"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, prefer = r.Method+" "+r.URL.Path, r.Header.Get("Prefer")
		raw, _ := io.ReadAll(r.Body)
		got = nil
		_ = json.Unmarshal(raw, &got)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"uuid":"u","state":"` + state + `"}`))
	}))
	t.Cleanup(srv.Close)
	run := func(args ...string) error {
		cmd := allocationGroupCmd()
		cmd.SetArgs(append(args, "--endpoint", srv.URL))
		cmd.SetOut(io.Discard)
		return cmd.Execute()
	}
	err := run("create", "--count", "8", "--resource-class", "baremetal-gpu", "--required", "rack",
		"--trait", "CUSTOM_GPU_A100", "--wait=5")
	var code exitCode
	require.True(t, errors.As(err, &code), err)
	require.Equal(t, exitCode(exitAllocationError), code)
	require.Equal(t, "POST /v1/allocation_groups", path)
	require.Equal(t, "wait=5", prefer)
	require.Equal(t, map[string]any{"count": float64(8), "resource_class": "baremetal-gpu", "required": "rack",
		"traits": []any{"CUSTOM_GPU_A100"}}, got)

	state = "active"
	require.NoError(t, run("show", "train-1", "--wait"))
	require.Equal(t, "GET /v1/allocation_groups/train-1", path)
	require.Equal(t, "wait=60", prefer)
	require.NoError(t, run("list", "--state", "error"))
	require.NoError(t, run("delete", "train-1"))
	require.Equal(t, "DELETE /v1/allocation_groups/u", path, "the group shown is the one deleted")
	require.Error(t, run("create", "--count", "2", "--resource-class", "x", "--required", "rack", "--preferred", "row"))
}
