package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gpuWeek is a lease document as GET /v1/leases/gpu-week answers it.
const gpuWeek = `{"uuid": "44444444-4444-4444-4444-444444444444", "name": "gpu-week", "project_id": "lab",
 "start_time": "2030-01-06T09:00:00Z", "end_time": "2030-01-08T09:00:00Z", "state": "pending", "on_start": "allocate",
 "status_reason": null, "reservations": [{"resource_class": "baremetal-gpu", "count": 2, "traits": ["CUSTOM_IB"],
 "forbidden_traits": [], "required": "rack", "domain": "2/9", "nodes": ["n1", "n2"]}],
 "created_at": "2030-01-01T00:00:00+00:00", "updated_at": null, "links": []}`

// calendarDoc is GET /v1/ui/leases over three days in 1-day steps: rack
// 1/9 free, rack 2/9 with gpu-week on 2 of its 3 nodes for the first two
// days and another project's lease on 1 node on the third, and one node
// without a rack.
const calendarDoc = `{"now": "2030-01-06T10:00:00Z", "after": "2030-01-06T00:00:00Z", "until": "2030-01-09T00:00:00Z",
 "step": 86400, "level": "rack", "levels": ["row", "rack"], "resource_class": null,
 "leases": [{"uuid": "44444444-4444-4444-4444-444444444444", "name": "gpu-week", "project_id": "lab", "state": "pending",
   "on_start": "allocate", "start_time": "2030-01-06T09:00:00Z", "end_time": "2030-01-08T09:00:00Z", "nodes": 2}],
 "rows": [
  {"domain": "1/9", "total": 3, "maintenance": 0, "classes": {"baremetal-gpu": 3}, "cells": [
    {"free": 3, "leases": [], "hidden": 0}, {"free": 3, "leases": [], "hidden": 0}, {"free": 3, "leases": [], "hidden": 0}]},
  {"domain": "2/9", "total": 3, "maintenance": 1, "classes": {"baremetal-gpu": 3}, "cells": [
    {"free": 0, "leases": [{"lease": 0, "nodes": 2}], "hidden": 0}, {"free": 0, "leases": [{"lease": 0, "nodes": 2}], "hidden": 0},
    {"free": 0, "leases": [{"lease": 0, "nodes": 2}], "hidden": 1}]},
  {"domain": "", "total": 1, "maintenance": 0, "classes": {"baremetal-gpu": 1}, "cells": [
    {"free": 1, "leases": [], "hidden": 0}, {"free": 1, "leases": [], "hidden": 0}, {"free": 1, "leases": [], "hidden": 0}]}]}`

// TestLeaseCommands: each lease command sends the request its flags say
// and prints the answer as the other commands print theirs.
func TestLeaseCommands(t *testing.T) {
	var bodies []string
	srv, seen := fakeAPI(t, func(r *http.Request) (int, string) {
		raw, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(raw))
		switch {
		case r.URL.Path == "/v1/leases" && r.Method == http.MethodGet:
			return 200, `{"leases": [` + gpuWeek + `]}`
		case r.URL.Path == "/v1/leases/availability":
			return 200, `{"resource_class": "baremetal-gpu", "count": 3, "traits": [], "forbidden_traits": [], "level": "rack",
				"mode": "required", "duration": 172800, "after": "2030-01-06T09:00:00Z", "start_time": "2030-01-08T09:00:00Z",
				"end_time": "2030-01-10T09:00:00Z", "domain": "2/9", "free": 3}`
		case r.URL.Path == "/v1/ui/leases":
			return 200, calendarDoc
		case r.Method == http.MethodDelete:
			return 204, ""
		}
		return 200, gpuWeek
	})
	last := func() string { return (*seen)[len(*seen)-1] }
	lastBody := func() map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(bodies[len(bodies)-1]), &m))
		return m
	}

	out, err := runCmd(t, leaseCmd, srv.URL, "create", "--name", "gpu-week", "--project", "lab", "--resource-class", "baremetal-gpu",
		"--count", "2", "--trait", "CUSTOM_IB", "--required", "rack", "--start", "2030-01-06T10:00:00+01:00", "--duration", "2d")
	require.NoError(t, err)
	require.Equal(t, "POST /v1/leases", last())
	require.Equal(t, map[string]any{"name": "gpu-week", "project_id": "lab", "start_time": "2030-01-06T09:00:00Z",
		"end_time": "2030-01-08T09:00:00Z", "reservations": []any{map[string]any{"resource_class": "baremetal-gpu",
			"count": float64(2), "traits": []any{"CUSTOM_IB"}, "required": "rack"}}}, lastBody())
	require.Regexp(t, `\| reservations +\| 2 of baremetal-gpu with CUSTOM_IB, required rack \(in 2/9\) +\|`, out)
	require.Regexp(t, `\| nodes +\| n1, n2 +\|`, out)

	_, err = runCmd(t, leaseCmd, srv.URL, "create", "--resource-class", "x", "--count", "1", "--end", "2030-01-08T09:00:00Z",
		"--forbidden-trait", "CUSTOM_OLD", "--preferred", "row", "--on-start", "lessee")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"end_time": "2030-01-08T09:00:00Z", "on_start": "lessee", "reservations": []any{
		map[string]any{"resource_class": "x", "count": float64(1), "forbidden_traits": []any{"CUSTOM_OLD"}, "preferred": "row"}}},
		lastBody(), "no start_time: the API starts it now")
	n := len(*seen)
	for _, bad := range [][]string{
		{"--end", "2030-01-08T09:00:00Z", "--duration", "1d"},
		{"--required", "rack", "--preferred", "row", "--duration", "1d"},
		{"--end", "monday"},
		{"--duration", "soon"},
	} {
		_, err = runCmd(t, leaseCmd, srv.URL, append([]string{"create", "--resource-class", "x", "--count", "1"}, bad...)...)
		require.Error(t, err, "%v", bad)
	}
	require.Len(t, *seen, n, "bad flags are refused before any request")

	out, err = runCmd(t, leaseCmd, srv.URL, "list", "--project", "lab", "--state", "pending")
	require.NoError(t, err)
	require.Equal(t, "GET /v1/leases?project_id=lab&state=pending", last())
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 5, out)
	require.Regexp(t, `^\| UUID +\| Name +\| Project \| State +\| Start +\| End +\| Reservations +\|$`, lines[1])
	require.Contains(t, lines[3], "| gpu-week | lab     | pending | 2030-01-06T09:00:00Z | 2030-01-08T09:00:00Z | 2 of baremetal-gpu")
	out, err = runCmd(t, leaseCmd, srv.URL, "list", "-f", "value", "-c", "name", "-c", "nodes")
	require.NoError(t, err)
	require.Equal(t, "gpu-week 2\n", out)

	_, err = runCmd(t, leaseCmd, srv.URL, "show", "gpu-week", "-f", "json")
	require.NoError(t, err)
	require.Equal(t, "GET /v1/leases/gpu-week", last())

	_, err = runCmd(t, leaseCmd, srv.URL, "update", "gpu-week", "--end", "2030-01-09T09:00:00Z", "--name", "gpu-9")
	require.NoError(t, err)
	require.Equal(t, "PATCH /v1/leases/gpu-week", last())
	require.JSONEq(t, `[{"op":"replace","path":"/end_time","value":"2030-01-09T09:00:00Z"},
		{"op":"replace","path":"/name","value":"gpu-9"}]`, bodies[len(bodies)-1])
	_, err = runCmd(t, leaseCmd, srv.URL, "update", "gpu-week")
	require.ErrorContains(t, err, "nothing to change")

	_, err = runCmd(t, leaseCmd, srv.URL, "cancel", "gpu-week")
	require.NoError(t, err)
	require.Equal(t, "POST /v1/leases/gpu-week/cancel", last())

	out, err = runCmd(t, leaseCmd, srv.URL, "delete", "gpu-week")
	require.NoError(t, err)
	require.Equal(t, "DELETE /v1/leases/44444444-4444-4444-4444-444444444444", last(), "the lease shown is the one deleted")
	require.Equal(t, "Deleted lease gpu-week (44444444-4444-4444-4444-444444444444), pending, 2 nodes from "+
		"2030-01-06T09:00:00Z to 2030-01-08T09:00:00Z\n", out)

	out, err = runCmd(t, leaseCmd, srv.URL, "availability", "--resource-class", "baremetal-gpu", "--count", "3",
		"--level", "rack", "--duration", "2d", "--after", "2030-01-06T09:00:00Z", "--trait", "CUSTOM_IB", "--trait", "CUSTOM_NVME")
	require.NoError(t, err)
	u, _ := url.Parse(strings.TrimPrefix(last(), "GET "))
	require.Equal(t, "/v1/leases/availability", u.Path)
	require.Equal(t, url.Values{"resource_class": {"baremetal-gpu"}, "count": {"3"}, "level": {"rack"}, "duration": {"172800"},
		"after": {"2030-01-06T09:00:00Z"}, "traits": {"CUSTOM_IB,CUSTOM_NVME"}}, u.Query())
	require.Regexp(t, `^\+-+\+-+\+\n\| Field +\| Value +\|\n\+-+\+-+\+\n\| start_time +\| 2030-01-08T09:00:00Z \|`, out)
}

// TestLeaseCalendar: calendar asks for whole days from today by default
// and prints the grid: racks down, days across, now marked, a cell the
// free nodes then LEASE:NODES, the legend below.
func TestLeaseCalendar(t *testing.T) {
	srv, seen := fakeAPI(t, func(*http.Request) (int, string) { return 200, calendarDoc })
	out, err := runCmd(t, leaseCmd, srv.URL, "calendar", "--days", "3")
	require.NoError(t, err)
	u, _ := url.Parse(strings.TrimPrefix((*seen)[0], "GET "))
	require.Equal(t, "/v1/ui/leases", u.Path)
	q := u.Query()
	require.Equal(t, "86400", q.Get("step"))
	after, err := time.Parse(time.RFC3339, q.Get("after"))
	require.NoError(t, err)
	require.Equal(t, after.Truncate(24*time.Hour), after, "from midnight UTC")
	require.Equal(t, after.AddDate(0, 0, 3).Format(time.RFC3339), q.Get("until"))

	require.Equal(t, `leases per rack, 2030-01-06 00:00 to 2030-01-09 00:00 UTC in steps of 1d; a cell: free nodes, then LEASE:NODES held
+-----------+--------------+------------+-----------+-----------+
| RACK      | NODES        | 01-06 Sun* | 01-07 Mon | 01-08 Tue |
+-----------+--------------+------------+-----------+-----------+
| 1/9       | 3            | 3          | 3         | 3         |
| 2/9       | 3 (1 maint.) | 0 A:2      | 0 A:2     | 0 A:2 ?:1 |
| (no rack) | 1            | 1          | 1         | 1         |
+-----------+--------------+------------+-----------+-----------+
A  gpu-week (44444444-4444-4444-4444-444444444444), project lab, pending, 2030-01-06T09:00:00Z to 2030-01-08T09:00:00Z, 2 nodes
* now: 2030-01-06T10:00:00Z
`, out)

	out, err = runCmd(t, leaseCmd, srv.URL, "calendar", "--after", "2030-01-06T00:00:00Z", "--until", "2030-01-07T00:00:00Z",
		"--step", "6h", "--level", "row", "--resource-class", "baremetal-gpu", "-f", "value")
	require.NoError(t, err)
	u, _ = url.Parse(strings.TrimPrefix((*seen)[1], "GET "))
	require.Equal(t, url.Values{"step": {"21600"}, "after": {"2030-01-06T00:00:00Z"}, "until": {"2030-01-07T00:00:00Z"},
		"level": {"row"}, "resource_class": {"baremetal-gpu"}}, u.Query())
	require.Equal(t, "1/9 3 3 3 3\n2/9 3 0 0 0\n(no rack) 1 1 1 1\n", out)

	out, err = runCmd(t, leaseCmd, srv.URL, "calendar", "-f", "json")
	require.NoError(t, err)
	require.JSONEq(t, calendarDoc, out)
	_, err = runCmd(t, leaseCmd, srv.URL, "calendar", "--step", "often")
	require.Error(t, err)
	require.Len(t, *seen, 3)
	require.Equal(t, "A", leaseLetter(0))
	require.Equal(t, "Z", leaseLetter(25))
	require.Equal(t, "AA", leaseLetter(26))
	require.Equal(t, "AZ", leaseLetter(51))
	require.Equal(t, "BA", leaseLetter(52))
}
