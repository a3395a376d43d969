package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestLeaseCalendarPage drives the fleet page's lease calendar (GET
// /v1/ui/leases) in headless Chromium against a real stack: the sample
// fleet's 30 GPU nodes reservable, the row/rack topology, and two leases
// booked through the API, train (3 nodes in one rack, from 12 h to 36 h
// after the current 6-hour block) and infer (2 nodes, days 2 to 3). The
// calendar has a row per rack with GPU nodes (18), one column per 6 hours
// for a week (28), the first one marked as now, each lease's chips in the
// cells of its window with its node count, and the free counts of train's
// rack lowered by 3 there. A screenshot is kept under $METALLOC_ARTIFACTS
// when set.
func TestLeaseCalendarPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sample := loadSample(t)
	stack, client := startStack(t, 1)
	enroll(t, ctx, client, sample)
	dir := artifactDir(t)
	require.Equal(t, http.StatusOK, groupCall(t, ctx, stack.APIURL, http.MethodPut, "/v1/topology",
		`{"levels":[{"name":"row","source":"extra.row"},{"name":"rack","source":"extra.rack"}]}`, nil))
	gpus := map[string]int{} // rack "row/rack" -> GPU nodes
	for _, s := range sample {
		if s.ResourceClass != "baremetal-gpu" {
			continue
		}
		gpus[fmt.Sprintf("%v/%v", s.Extra["row"], s.Extra["rack"])]++
		require.Equal(t, http.StatusOK, groupCall(t, ctx, stack.APIURL, http.MethodPatch, "/v1/nodes/"+s.UUID,
			`[{"op":"replace","path":"/reservable","value":true}]`, nil))
	}
	require.Len(t, gpus, 18)

	block := time.Now().UTC().Truncate(6 * time.Hour)
	at := func(h int) string { return block.Add(time.Duration(h) * time.Hour).Format(time.RFC3339) }
	type leaseDoc struct {
		UUID         string `json:"uuid"`
		Reservations []struct {
			Domain *string `json:"domain"`
		} `json:"reservations"`
	}
	var train, infer leaseDoc
	require.Equal(t, http.StatusCreated, groupCall(t, ctx, stack.APIURL, http.MethodPost, "/v1/leases", fmt.Sprintf(
		`{"name":"train","project_id":"lab","start_time":%q,"end_time":%q,
		  "reservations":[{"resource_class":"baremetal-gpu","count":3,"required":"rack"}]}`, at(12), at(36)), &train))
	require.Equal(t, http.StatusCreated, groupCall(t, ctx, stack.APIURL, http.MethodPost, "/v1/leases", fmt.Sprintf(
		`{"name":"infer","project_id":"web","start_time":%q,"end_time":%q,
		  "reservations":[{"resource_class":"baremetal-gpu","count":2}]}`, at(48), at(72)), &infer))
	rack := *train.Reservations[0].Domain

	bctx := browser(t, 1600, 1200)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(stack.APIURL+"/ui/")))
	waitJS(t, bctx, 30*time.Second, "the lease calendar",
		`metalloc.leaseCalReady === true && document.querySelectorAll('#lease-cal tbody tr').length > 1`)

	page := evalJS[struct {
		Rows     int            `json:"rows"`
		Cols     int            `json:"cols"`
		NowCol   int            `json:"nowCol"`
		NowMark  bool           `json:"nowMark"`
		Chips    map[string]int `json:"chips"`
		Columns  map[string][]int
		Free     []int    `json:"free"`
		Legend   []string `json:"legend"`
		Domains  []string `json:"domains"`
		TrainRow string   `json:"trainRow"`
		After    string   `json:"after"`
	}](t, bctx, fmt.Sprintf(`(() => {
		const q = (s) => [...document.querySelectorAll(s)];
		const chips = {}, columns = {};
		for (const c of q('#lease-cal .lease-chip[data-lease]')) {
			chips[c.dataset.lease] = (chips[c.dataset.lease] || 0) + 1;
			(columns[c.dataset.lease] = columns[c.dataset.lease] || []).push(c.parentElement.cellIndex - 2);
		}
		const row = document.querySelector('#lease-cal tbody tr[data-domain=%q]');
		return {
			rows: q('#lease-cal tbody tr').length, cols: q('#lease-cal thead th').length - 2,
			nowCol: q('#lease-cal thead th').findIndex(th => th.classList.contains('now')) - 2,
			nowMark: !!document.querySelector('#lease-cal thead th.now .now-mark'),
			chips, columns, free: [...row.querySelectorAll('td.cell')].map(td => Number(td.dataset.free)),
			legend: q('#lease-legend li').map(li => li.textContent),
			domains: q('#lease-cal tbody th.domain').map(th => th.textContent),
			trainRow: row.textContent, after: metalloc.leaseCal.after,
		};
	})()`, rack))
	require.Equal(t, 18, page.Rows, "a row per rack with GPU nodes: %v", page.Domains)
	require.Equal(t, 28, page.Cols, "a week of 6-hour cells")
	require.Equal(t, 0, page.NowCol, "the first column holds now")
	require.True(t, page.NowMark)
	// The columns of a window: the page's first column is its current
	// 6-hour block (the test's, unless the clock crossed a block since).
	after, err := time.Parse(time.RFC3339, page.After)
	require.NoError(t, err)
	cols := func(from, to int) []int {
		var out []int
		for i := range 28 {
			start := after.Add(time.Duration(i) * 6 * time.Hour)
			if start.Before(block.Add(time.Duration(to)*time.Hour)) && start.Add(6*time.Hour).After(block.Add(time.Duration(from)*time.Hour)) {
				out = append(out, i)
			}
		}
		return out
	}
	require.Equal(t, cols(12, 36), page.Columns[train.UUID], "train over [12 h, 36 h)")
	inferCols := cols(48, 72)
	require.Contains(t, []int{len(inferCols), 2 * len(inferCols)}, page.Chips[infer.UUID],
		"infer's 2 nodes are in 1 or 2 racks: a chip per rack and column: %v", page.Columns[infer.UUID])
	total := gpus[rack]
	trainCols, busy := cols(12, 36), map[int]bool{}
	for _, i := range append(trainCols, inferCols...) {
		busy[i] = true
	}
	for i, f := range page.Free {
		switch {
		case slices.Contains(trainCols, i):
			require.LessOrEqual(t, f, total-3, "column %d of %s", i, rack)
		case !busy[i]:
			require.Equal(t, total, f, "column %d of %s: nothing booked", i, rack)
		}
	}
	require.Contains(t, page.TrainRow, "A 3")
	require.Len(t, page.Legend, 2)
	require.Contains(t, page.Legend[0], "train — project lab, pending")
	require.Contains(t, page.Legend[1], "infer — project web, pending")
	screenshot(t, bctx, dir, "lease-calendar")
}
