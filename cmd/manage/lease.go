package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// leaseCmd is `metalloc-manage lease list|show|create|update|cancel|
// delete|calendar|availability`: a client of metalloc-api's lease API
// (/v1/leases, /v1/leases/availability, and the calendar of GET
// /v1/ui/leases, the fleet page's), printing as the other commands do.
func leaseCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "lease",
		Short: "book reservable nodes for a future window, and see the bookings per rack, through metalloc-api",
		Long: "Talks HTTP to metalloc-api as `metalloc-manage allocation` does (same flags and credentials).\n" +
			"create, show, update, cancel and availability print a Field/Value table, list a table\n" +
			"(-f json|yaml|value for others, -c COLUMN for some columns); calendar prints the per-rack\n" +
			"calendar of the fleet page as a text grid (-f json for the API's document). Times are\n" +
			"RFC 3339 (2030-01-06T09:00:00Z) or now; lengths Go durations (48h, 90m) or days (7d).",
	}
	newClient := apiClientFlags(c)
	// call checks out's format (nil: none) before anything is sent, then
	// sends one request.
	call := func(cmd *cobra.Command, out *output, method, path string, body []byte) (map[string]any, error) {
		if out != nil {
			if err := out.check(); err != nil {
				return nil, err
			}
		}
		cl, err := newClient(cmd)
		if err != nil {
			return nil, err
		}
		return cl.Do(cmd.Context(), method, path, body, 0)
	}

	var listOut, showOut, createOut, updateOut, cancelOut, availOut *output

	var project, state string
	var long bool
	list := &cobra.Command{
		Use:   "list [--project P] [--state S] [--long] [-f table|json|yaml|value] [-c COLUMN]...",
		Short: "list leases (the first page of api.max_limit, in creation order)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if project != "" {
				q.Set("project_id", project)
			}
			if state != "" {
				q.Set("state", state)
			}
			path := "/v1/leases"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			doc, err := call(cmd, listOut, http.MethodGet, path, nil)
			if err != nil {
				return err
			}
			cols := leaseColumns
			if long || len(listOut.columns) > 0 {
				cols = append(slices.Clone(leaseColumns), leaseLongColumns...)
			}
			return listOut.list(cmd.OutOrStdout(), cols, docsOf(doc, "leases"))
		},
	}
	list.Flags().StringVar(&project, "project", "", "only the leases of this project")
	list.Flags().StringVar(&state, "state", "", "only leases in this state (pending, active, ended, error, cancelled)")
	list.Flags().BoolVar(&long, "long", false, "also on_start, the status reason, the nodes and the creation time")
	listOut = addOutputFlags(list)

	show := &cobra.Command{
		Use:   "show IDENT",
		Short: "show a lease (uuid or name): its window, state, reservations and nodes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := call(cmd, showOut, http.MethodGet, "/v1/leases/"+url.PathEscape(args[0]), nil)
			if err != nil {
				return err
			}
			return showLease(cmd.OutOrStdout(), showOut, doc)
		},
	}
	showOut = addOutputFlags(show)

	var req leaseRequest
	create := &cobra.Command{
		Use: "create --resource-class CLASS --count N (--end TIME | --duration D) [--start TIME] [--required LEVEL | --preferred LEVEL]\n" +
			"  [--trait T]... [--forbidden-trait T]... [--name N] [--project P] [--on-start allocate|lessee]",
		Short: "book COUNT reservable nodes of a class for [start, end): 409 with the reason and the earliest window when they are not free",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := req.body(time.Now())
			if err != nil {
				return err
			}
			doc, err := call(cmd, createOut, http.MethodPost, "/v1/leases", body)
			if err != nil {
				return err
			}
			return showLease(cmd.OutOrStdout(), createOut, doc)
		},
	}
	createOut = addOutputFlags(create)
	f := create.Flags()
	f.StringVar(&req.resourceClass, "resource-class", "", "resource class of the nodes (required)")
	f.IntVar(&req.count, "count", 0, "how many nodes (required)")
	f.StringVar(&req.start, "start", "", "start time (RFC 3339 or now; default now)")
	f.StringVar(&req.end, "end", "", "end time (RFC 3339)")
	f.StringVar(&req.duration, "duration", "", "length instead of --end (48h, 7d)")
	f.StringVar(&req.required, "required", "", "topology level (e.g. rack) all nodes must share one domain of")
	f.StringVar(&req.preferred, "preferred", "", "topology level to keep the nodes in one domain of if any has room")
	f.StringArrayVar(&req.traits, "trait", nil, "trait every node must have (repeatable)")
	f.StringArrayVar(&req.forbidden, "forbidden-trait", nil, "trait no node may have (repeatable)")
	f.StringVar(&req.name, "name", "", "lease name")
	f.StringVar(&req.project, "project", "", "owning project (default: the caller's)")
	f.StringVar(&req.onStart, "on-start", "", "at the start: allocate (an allocation per node, the default) or lessee (the nodes' lessee set)")
	_ = create.MarkFlagRequired("resource-class")
	_ = create.MarkFlagRequired("count")

	var newEnd, newName string
	update := &cobra.Command{
		Use:   "update IDENT [--end TIME] [--name N]",
		Short: "move a pending or active lease's end (409 naming the node and lease in the way) or rename it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var patch []map[string]any
			if newEnd != "" {
				end, err := parseWhen("--end", newEnd, time.Now())
				if err != nil {
					return err
				}
				patch = append(patch, map[string]any{"op": "replace", "path": "/end_time", "value": end})
			}
			if cmd.Flags().Changed("name") {
				op := map[string]any{"op": "replace", "path": "/name", "value": newName}
				if newName == "" {
					op = map[string]any{"op": "remove", "path": "/name"}
				}
				patch = append(patch, op)
			}
			if len(patch) == 0 {
				return errors.New("nothing to change: give --end and/or --name")
			}
			body, _ := json.Marshal(patch)
			doc, err := call(cmd, updateOut, http.MethodPatch, "/v1/leases/"+url.PathEscape(args[0]), body)
			if err != nil {
				return err
			}
			return showLease(cmd.OutOrStdout(), updateOut, doc)
		},
	}
	update.Flags().StringVar(&newEnd, "end", "", "new end time (RFC 3339)")
	update.Flags().StringVar(&newName, "name", "", "new name (empty: none)")
	updateOut = addOutputFlags(update)

	cancel := &cobra.Command{
		Use:   "cancel IDENT",
		Short: "cancel a pending lease (or one in error): its nodes stop blocking at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := call(cmd, cancelOut, http.MethodPost, "/v1/leases/"+url.PathEscape(args[0])+"/cancel", nil)
			if err != nil {
				return err
			}
			return showLease(cmd.OutOrStdout(), cancelOut, doc)
		},
	}
	cancelOut = addOutputFlags(cancel)

	del := &cobra.Command{
		Use:   "delete IDENT",
		Short: "delete a lease that is not active, with its bookings; prints what it deleted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Do(cmd.Context(), http.MethodGet, "/v1/leases/"+url.PathEscape(args[0]), nil, 0)
			if err != nil {
				return err
			}
			id, _ := doc["uuid"].(string)
			if _, err := cl.Do(cmd.Context(), http.MethodDelete, "/v1/leases/"+id, nil, 0); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted lease %s, %s, %d nodes from %s to %s\n", describe(doc), doc["state"],
				len(leaseNodes(doc)), doc["start_time"], doc["end_time"])
			return nil
		},
	}

	var cal calendarRequest
	calendar := &cobra.Command{
		Use:   "calendar [--days N | --until TIME] [--after TIME] [--step D] [--level L] [--resource-class C] [-f table|json|yaml|value]",
		Short: "the leases per rack over the next days as a text grid (the fleet page's calendar)",
		Long: "One row per topology domain (the finest level, e.g. rack, unless --level), one column per\n" +
			"step (default 1d) from --after (default: the current step) for --days (default 7). A cell\n" +
			"is the nodes free for the whole step, then the leases holding nodes then, as LETTER:NODES\n" +
			"(? for leases you may not see); the legend below names the leases; * marks now.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := (&output{format: cal.format}).check(); err != nil {
				return err
			}
			path, err := cal.path(time.Now())
			if err != nil {
				return err
			}
			doc, err := call(cmd, nil, http.MethodGet, path, nil)
			if err != nil {
				return err
			}
			var parsed leaseCalendar
			raw, _ := json.Marshal(doc)
			if err := json.Unmarshal(raw, &parsed); err != nil {
				return fmt.Errorf("reading the calendar: %w", err)
			}
			switch cal.format {
			case "json", "yaml":
				return encode(cmd.OutOrStdout(), cal.format, doc)
			case "value":
				printCalendarValues(cmd.OutOrStdout(), parsed)
				return nil
			}
			printCalendar(cmd.OutOrStdout(), parsed)
			return nil
		},
	}
	cf := calendar.Flags()
	cf.StringVar(&cal.after, "after", "", "first column's start (RFC 3339; default now, rounded down to the step)")
	cf.StringVar(&cal.until, "until", "", "end of the last column (RFC 3339; instead of --days)")
	cf.IntVar(&cal.days, "days", 7, "how many days to show")
	cf.StringVar(&cal.step, "step", "1d", "a column's length (1d, 12h, 6h, ...)")
	cf.StringVar(&cal.level, "level", "", "topology level of the rows (default the finest, e.g. rack)")
	cf.StringVar(&cal.resourceClass, "resource-class", "", "only nodes of this class")
	cf.StringVarP(&cal.format, "format", "f", "table", "output format: table (the grid), json, yaml (the API's document), value (free nodes per cell)")

	var av availabilityRequest
	availability := &cobra.Command{
		Use:   "availability --resource-class CLASS --duration D [--count N] [--level L [--mode required|preferred]] [--after TIME] [--trait T]...",
		Short: "the earliest window at which COUNT reservable nodes are free for D (and in which domain)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := av.path(time.Now())
			if err != nil {
				return err
			}
			doc, err := call(cmd, availOut, http.MethodGet, path, nil)
			if err != nil {
				return err
			}
			return availOut.show(cmd.OutOrStdout(), doc, "start_time", "end_time", "domain", "free", "reason",
				"resource_class", "count", "traits", "forbidden_traits", "level", "mode", "duration", "after")
		},
	}
	af := availability.Flags()
	af.StringVar(&av.resourceClass, "resource-class", "", "resource class of the nodes (required)")
	af.IntVar(&av.count, "count", 1, "how many nodes")
	af.StringVar(&av.duration, "duration", "", "how long (48h, 7d; required)")
	af.StringVar(&av.level, "level", "", "topology level all nodes must share one domain of")
	af.StringVar(&av.mode, "mode", "", "required (the default with --level) or preferred (anywhere)")
	af.StringVar(&av.after, "after", "", "earliest start (RFC 3339; default now)")
	af.StringVar(&av.horizon, "horizon", "", "how far to look (default 90d)")
	af.StringArrayVar(&av.traits, "trait", nil, "trait every node must have (repeatable)")
	af.StringArrayVar(&av.forbidden, "forbidden-trait", nil, "trait no node may have (repeatable)")
	_ = availability.MarkFlagRequired("resource-class")
	_ = availability.MarkFlagRequired("duration")
	availOut = addOutputFlags(availability)

	c.AddCommand(list, show, create, update, cancel, del, calendar, availability)
	return c
}

// leaseFields is the order `lease show` prints a lease's fields in (the
// rest follow, sorted).
var leaseFields = []string{"uuid", "name", "project_id", "state", "start_time", "end_time", "on_start",
	"reservations", "nodes", "status_reason", "created_at", "updated_at"}

// leaseColumns are the columns of `lease list`; leaseLongColumns follow
// them with --long (or when -c picks columns).
var (
	leaseColumns = []column{
		{heading: "UUID", field: "uuid"},
		{heading: "Name", field: "name"},
		{heading: "Project", field: "project_id"},
		{heading: "State", field: "state"},
		{heading: "Start", field: "start_time"},
		{heading: "End", field: "end_time"},
		{heading: "Reservations", field: "reservations", value: func(d map[string]any) any {
			return strings.Join(reservationSummaries(d), "; ")
		}},
	}
	leaseLongColumns = []column{
		{heading: "On Start", field: "on_start"},
		{heading: "Status Reason", field: "status_reason"},
		{heading: "Nodes", field: "nodes", value: func(d map[string]any) any { return len(leaseNodes(d)) }},
		{heading: "Created At", field: "created_at"},
	}
)

// reservationSummaries describes each reservation of lease document d
// in a few words: "2 of baremetal-gpu with CUSTOM_IB, required rack (in
// 2/9)".
func reservationSummaries(d map[string]any) []string {
	var out []string
	for _, r := range docsOf(d, "reservations") {
		s := fmt.Sprintf("%s of %s", cell(r["count"]), cell(r["resource_class"]))
		if ts, _ := r["traits"].([]any); len(ts) > 0 {
			s += " with " + cell(ts)
		}
		if ts, _ := r["forbidden_traits"].([]any); len(ts) > 0 {
			s += " without " + cell(ts)
		}
		for _, rule := range []string{"required", "preferred"} {
			if level, _ := r[rule].(string); level != "" {
				s += ", " + rule + " " + level
			}
		}
		if dom, _ := r["domain"].(string); dom != "" {
			s += " (in " + dom + ")"
		}
		out = append(out, s)
	}
	return out
}

// leaseNodes are the node uuids of every reservation of lease document d.
func leaseNodes(d map[string]any) []any {
	var out []any
	for _, r := range docsOf(d, "reservations") {
		ns, _ := r["nodes"].([]any)
		out = append(out, ns...)
	}
	return out
}

// showLease prints lease document doc: in a table or as values, the
// reservations summarised and the nodes listed (reservationSummaries);
// in json and yaml the API's document as it is.
func showLease(w io.Writer, out *output, doc map[string]any) error {
	if out.format == "table" || out.format == "value" {
		flat := make(map[string]any, len(doc)+1)
		for k, v := range doc {
			flat[k] = v
		}
		rs := make([]any, 0)
		for _, s := range reservationSummaries(doc) {
			rs = append(rs, s)
		}
		flat["reservations"] = rs
		flat["nodes"] = leaseNodes(doc)
		if flat["nodes"] == nil {
			flat["nodes"] = []any{}
		}
		doc = flat
	}
	return out.show(w, doc, leaseFields...)
}

// leaseRequest are `lease create`'s flags.
type leaseRequest struct {
	resourceClass, start, end, duration, required, preferred string
	name, project, onStart                                   string
	count                                                    int
	traits, forbidden                                        []string
}

// body is the POST /v1/leases body of r, now being the time for "now"
// and --duration without --start.
func (r leaseRequest) body(now time.Time) ([]byte, error) {
	if r.required != "" && r.preferred != "" {
		return nil, errors.New("give --required or --preferred, not both")
	}
	if (r.end == "") == (r.duration == "") {
		return nil, errors.New("give --end or --duration (one of them)")
	}
	res := map[string]any{"resource_class": r.resourceClass, "count": r.count}
	if len(r.traits) > 0 {
		res["traits"] = r.traits
	}
	if len(r.forbidden) > 0 {
		res["forbidden_traits"] = r.forbidden
	}
	if r.required != "" {
		res["required"] = r.required
	}
	if r.preferred != "" {
		res["preferred"] = r.preferred
	}
	body := map[string]any{"reservations": []any{res}}
	start := now.UTC().Truncate(time.Second)
	if r.start != "" {
		s, err := parseWhen("--start", r.start, now)
		if err != nil {
			return nil, err
		}
		body["start_time"] = s
		start, _ = time.Parse(time.RFC3339, s)
	}
	if r.end != "" {
		e, err := parseWhen("--end", r.end, now)
		if err != nil {
			return nil, err
		}
		body["end_time"] = e
	} else {
		d, err := parseLength("--duration", r.duration)
		if err != nil {
			return nil, err
		}
		if r.start == "" {
			body["start_time"] = start.Format(time.RFC3339) // the window is [now, now + d)
		}
		body["end_time"] = start.Add(d).Format(time.RFC3339)
	}
	for k, v := range map[string]string{"name": r.name, "project_id": r.project, "on_start": r.onStart} {
		if v != "" {
			body[k] = v
		}
	}
	return json.Marshal(body)
}

// parseWhen reads a time flag: RFC 3339 (any offset, written back in
// UTC) or "now" (now, whole seconds).
func parseWhen(flag, s string, now time.Time) (string, error) {
	if s == "now" {
		return now.UTC().Truncate(time.Second).Format(time.RFC3339), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return "", fmt.Errorf("%s %q: want an RFC 3339 time such as 2030-01-06T09:00:00Z, or now", flag, s)
	}
	return t.UTC().Format(time.RFC3339), nil
}

// parseLength reads a length flag: a Go duration (48h, 90m) or whole days
// (7d), at least a second.
func parseLength(flag, s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(n) * 24 * time.Hour
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%s %q: want a length such as 48h, 90m or 7d", flag, s)
	}
	return d, nil
}

// seconds writes a length as whole seconds, as the API reads them.
func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// availabilityRequest are `lease availability`'s flags.
type availabilityRequest struct {
	resourceClass, duration, level, mode, after, horizon string
	count                                                int
	traits, forbidden                                    []string
}

// path is the GET /v1/leases/availability request of a.
func (a availabilityRequest) path(now time.Time) (string, error) {
	q := url.Values{"resource_class": {a.resourceClass}, "count": {strconv.Itoa(a.count)}}
	d, err := parseLength("--duration", a.duration)
	if err != nil {
		return "", err
	}
	q.Set("duration", seconds(d))
	if a.horizon != "" {
		h, err := parseLength("--horizon", a.horizon)
		if err != nil {
			return "", err
		}
		q.Set("horizon", seconds(h))
	}
	if a.after != "" {
		t, err := parseWhen("--after", a.after, now)
		if err != nil {
			return "", err
		}
		q.Set("after", t)
	}
	if a.level != "" {
		q.Set("level", a.level)
	}
	if a.mode != "" {
		q.Set("mode", a.mode)
	}
	if len(a.traits) > 0 {
		q.Set("traits", strings.Join(a.traits, ","))
	}
	if len(a.forbidden) > 0 {
		q.Set("forbidden_traits", strings.Join(a.forbidden, ","))
	}
	return "/v1/leases/availability?" + q.Encode(), nil
}

// calendarRequest are `lease calendar`'s flags.
type calendarRequest struct {
	after, until, step, level, resourceClass, format string
	days                                             int
}

// path is the GET /v1/ui/leases request of r: --after rounded down to
// the step by the API when not given, --days from there (the API's
// rounding repeated here, so that the period is whole days).
func (r calendarRequest) path(now time.Time) (string, error) {
	step, err := parseLength("--step", r.step)
	if err != nil {
		return "", err
	}
	q := url.Values{"step": {seconds(step)}}
	after := now.UTC().Truncate(time.Second)
	after = after.Add(-time.Duration(after.Unix()%int64(step/time.Second)) * time.Second)
	if r.after != "" {
		s, err := parseWhen("--after", r.after, now)
		if err != nil {
			return "", err
		}
		after, _ = time.Parse(time.RFC3339, s)
	}
	q.Set("after", after.Format(time.RFC3339))
	if r.until != "" {
		s, err := parseWhen("--until", r.until, now)
		if err != nil {
			return "", err
		}
		q.Set("until", s)
	} else {
		if r.days < 1 {
			return "", fmt.Errorf("--days %d: want at least 1", r.days)
		}
		q.Set("until", after.AddDate(0, 0, r.days).Format(time.RFC3339))
	}
	if r.level != "" {
		q.Set("level", r.level)
	}
	if r.resourceClass != "" {
		q.Set("resource_class", r.resourceClass)
	}
	return "/v1/ui/leases?" + q.Encode(), nil
}

// leaseCalendar is GET /v1/ui/leases' document (lease.Calendar), as the
// CLI reads it.
type leaseCalendar struct {
	Now, After, Until string
	Step              int64
	Level             *string
	ResourceClass     *string `json:"resource_class"`
	Leases            []struct {
		UUID      string
		Name      *string
		ProjectID string `json:"project_id"`
		State     string
		StartTime string `json:"start_time"`
		EndTime   string `json:"end_time"`
		Nodes     int
	}
	Rows []struct {
		Domain      string
		Total       int
		Maintenance int
		Cells       []struct {
			Free   int
			Leases []struct{ Lease, Nodes int }
			Hidden int
		}
	}
}

// leaseLetter names lease i of a calendar in its grid: A..Z, then AA, AB...
func leaseLetter(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('A'+(i-1)%26)) + s
	}
	return s
}

// domainLabel names a calendar row: its domain, "(no LEVEL)" for the nodes
// without a value at the level, "all" without a level.
func domainLabel(level *string, domain string) string {
	switch {
	case level == nil:
		return "all"
	case domain == "":
		return "(no " + *level + ")"
	}
	return domain
}

// printCalendar prints cal as a grid: a line saying what it shows, a
// table (the level's domains down, the steps across; a cell is the free
// nodes then LETTER:NODES per lease, ?:NODES for the hidden ones), and
// the legend of the leases.
func printCalendar(w io.Writer, cal leaseCalendar) {
	after, _ := time.Parse(time.RFC3339, cal.After)
	until, _ := time.Parse(time.RFC3339, cal.Until)
	now, _ := time.Parse(time.RFC3339, cal.Now)
	step := time.Duration(cal.Step) * time.Second
	what := "reservable nodes"
	if cal.ResourceClass != nil {
		what = "reservable nodes of " + *cal.ResourceClass
	}
	level := "ALL"
	if cal.Level != nil {
		level = strings.ToUpper(*cal.Level)
	}
	fmt.Fprintf(w, "leases per %s, %s to %s UTC in steps of %s; a cell: free nodes, then LEASE:NODES held\n",
		strings.ToLower(level), after.Format("2006-01-02 15:04"), until.Format("2006-01-02 15:04"), formatStep(step))
	headings := []string{level, "NODES"}
	steps := 0
	if len(cal.Rows) > 0 {
		steps = len(cal.Rows[0].Cells)
	}
	for i := range steps {
		from := after.Add(time.Duration(i) * step)
		h := from.Format("01-02 Mon")
		if step%(24*time.Hour) != 0 {
			h = from.Format("01-02 15:04")
		}
		if !now.Before(from) && now.Before(from.Add(step)) {
			h += "*"
		}
		headings = append(headings, h)
	}
	rows := make([][]string, 0, len(cal.Rows))
	for _, r := range cal.Rows {
		total := strconv.Itoa(r.Total)
		if r.Maintenance > 0 {
			total += fmt.Sprintf(" (%d maint.)", r.Maintenance)
		}
		row := []string{domainLabel(cal.Level, r.Domain), total}
		for _, c := range r.Cells {
			parts := []string{strconv.Itoa(c.Free)}
			for _, l := range c.Leases {
				parts = append(parts, fmt.Sprintf("%s:%d", leaseLetter(l.Lease), l.Nodes))
			}
			if c.Hidden > 0 {
				parts = append(parts, fmt.Sprintf("?:%d", c.Hidden))
			}
			row = append(row, strings.Join(parts, " "))
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "no %s\n", what)
		return
	}
	printTable(w, headings, rows)
	for i, l := range cal.Leases {
		name := l.UUID
		if l.Name != nil {
			name = *l.Name + " (" + l.UUID + ")"
		}
		fmt.Fprintf(w, "%s  %s, project %s, %s, %s to %s, %d nodes\n", leaseLetter(i), name, l.ProjectID, l.State,
			l.StartTime, l.EndTime, l.Nodes)
	}
	fmt.Fprintf(w, "* now: %s\n", now.Format(time.RFC3339))
}

// printCalendarValues prints one line per row: the domain, its node count
// and the free nodes of each step, space-separated (for scripts).
func printCalendarValues(w io.Writer, cal leaseCalendar) {
	for _, r := range cal.Rows {
		cells := []string{domainLabel(cal.Level, r.Domain), strconv.Itoa(r.Total)}
		for _, c := range r.Cells {
			cells = append(cells, strconv.Itoa(c.Free))
		}
		fmt.Fprintln(w, strings.Join(cells, " "))
	}
}

// formatStep writes a step as the flags take it: 1d, 6h, 90m, 45s.
func formatStep(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return strconv.Itoa(int(d/time.Second)) + "s"
}
