package lease

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/web"
)

// MaxCalendarSteps bounds the steps of one calendar (until - after over
// step).
const MaxCalendarSteps = 2000

// availability is GET /v1/leases/availability, in two forms (the
// response shapes are in docs/leases.md):
//
//   - the earliest window: resource_class (required), count (default 1),
//     traits and forbidden_traits (comma-separated), level and mode
//     (required, the default with a level: all in one domain; preferred:
//     anywhere), duration (required: seconds, or a Go duration such as
//     48h), after (RFC 3339, default now), horizon (default 90 days):
//     the earliest start >= after, within the horizon, at which count
//     such reservable nodes are free for duration; null with a reason when
//     none;
//   - with until: the calendar, the free capacity over [after, until) in
//     steps of step (default 1h; at most MaxCalendarSteps steps) per
//     resource class (all when resource_class is not given) and domain of
//     level (the whole fleet without one): per step, how many eligible
//     nodes are free for the whole step.
//
// The matching nodes come from the Store's copy of the pool (pool.go),
// their busy intervals over the period from one query (else both from
// MatchingNodes); the rest is a sweep in Go (earliest, calendar). Any
// authenticated caller may ask: the answer is counts, no lease or node.
func (h *Handler) availability(c echo.Context) error {
	ctx := c.Request().Context()
	qp := c.QueryParam
	r := Reservation{ResourceClass: qp("resource_class"), Count: 1, Rule: RuleNone, LevelIndex: -1,
		Traits: splitList(qp("traits")), Forbidden: splitList(qp("forbidden_traits"))}
	if s := qp("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100000 {
			return web.BadRequest("Invalid count %q: expected an integer from 1 to 100000", s)
		}
		r.Count = n
	}
	now := h.opts.Now().UTC().Truncate(time.Second)
	after := now
	if s := qp("after"); s != "" && s != "now" {
		var err error
		if after, err = parseTime("after", s); err != nil {
			return err
		}
	}
	if level := qp("level"); level != "" {
		levels, err := topology.Load(ctx, h.pool)
		if err != nil {
			return err
		}
		if r.LevelIndex, err = topology.LevelIndex(levels, level); err != nil {
			return web.BadRequest("Invalid level: %v", err)
		}
		r.Level, r.Sources = level, levelSources(levels, r.LevelIndex)
		switch mode := qp("mode"); mode {
		case "", RuleRequired:
			r.Rule = RuleRequired
		case RulePreferred:
			r.Rule = RulePreferred
		default:
			return web.BadRequest("Invalid mode %q: expected required or preferred", mode)
		}
	} else if qp("mode") != "" {
		return web.BadRequest("mode needs a level")
	}
	if s := qp("until"); s != "" {
		return h.calendar(c, r, after, s)
	}
	if r.ResourceClass == "" {
		return web.BadRequest("resource_class is required (without until)")
	}
	dur, err := parseSeconds("duration", qp("duration"), 0)
	if err != nil {
		return err
	}
	horizon, err := parseSeconds("horizon", qp("horizon"), Horizon)
	if err != nil {
		return err
	}
	var nodes []node
	err = h.store.inReadTx(ctx, func(_ *Queries, tx pgx.Tx) error {
		nodes, err = h.store.matchingOn(ctx, tx, &r.ResourceClass, r.Traits, r.Forbidden, r.Sources,
			after, after.Add(horizon+dur))
		return err
	})
	if err != nil {
		return err
	}
	out := map[string]any{
		"resource_class": r.ResourceClass, "count": r.Count, "traits": nonNil(r.Traits),
		"forbidden_traits": nonNil(r.Forbidden), "level": nil, "mode": nil,
		"duration": int64(dur / time.Second), "after": after.Format(timeFormat),
		"start_time": nil, "end_time": nil, "domain": nil, "free": nil,
	}
	if r.Rule != RuleNone {
		out["level"], out["mode"] = r.Level, r.Rule
	}
	start, domain, free, ok := earliest(nodes, r.Count, levelFor(r), unix(after), int64(dur/time.Second),
		unix(after.Add(horizon)))
	if !ok {
		eligible := 0
		for _, n := range nodes {
			if n.Eligible {
				eligible++
			}
		}
		out["reason"] = fmt.Sprintf("no window of that length starts before %s: %d reservable nodes %s "+
			"are out of maintenance, %d wanted", after.Add(horizon).Format(timeFormat), eligible,
			topology.Describe(r.ResourceClass, r.Traits), r.Count)
		return c.JSON(http.StatusOK, out)
	}
	out["start_time"] = fromUnix(start).Format(timeFormat)
	out["end_time"] = fromUnix(start).Add(dur).Format(timeFormat)
	out["free"] = free
	if r.Rule == RuleRequired {
		out["domain"] = domain
	}
	return c.JSON(http.StatusOK, out)
}

// calendar is availability's calendar form (see availability).
func (h *Handler) calendar(c echo.Context, r Reservation, after time.Time, untilS string) error {
	ctx := c.Request().Context()
	until, err := parseTime("until", untilS)
	if err != nil {
		return err
	}
	if !until.After(after) {
		return web.BadRequest("Invalid until %s: not after after (%s)", until.Format(timeFormat), after.Format(timeFormat))
	}
	step, err := parseSeconds("step", c.QueryParam("step"), time.Hour)
	if err != nil {
		return err
	}
	if step < time.Second {
		return web.BadRequest("Invalid step: at least one second")
	}
	steps := int((until.Sub(after) + step - 1) / step)
	if steps > MaxCalendarSteps {
		return web.BadRequest("Too many steps: %d from %s to %s in steps of %s, at most %d: take a longer step",
			steps, after.Format(timeFormat), until.Format(timeFormat), step, MaxCalendarSteps)
	}
	var rc *string
	if r.ResourceClass != "" {
		rc = &r.ResourceClass
	}
	var nodes []node
	err = h.store.inReadTx(ctx, func(_ *Queries, tx pgx.Tx) error {
		nodes, err = h.store.matchingOn(ctx, tx, rc, r.Traits, r.Forbidden, r.Sources,
			after, after.Add(time.Duration(steps)*step))
		return err
	})
	if err != nil {
		return err
	}
	out := map[string]any{
		"after": after.Format(timeFormat), "until": until.Format(timeFormat), "step": int64(step / time.Second),
		"level": nil, "capacity": calendar(nodes, r.LevelIndex, unix(after), int64(step/time.Second), steps),
	}
	if r.LevelIndex >= 0 {
		out["level"] = r.Level
	}
	return c.JSON(http.StatusOK, out)
}

// parseSeconds reads a length of time given as whole seconds ("172800")
// or a Go duration ("48h"), positive, whole seconds; def when s is empty
// (def 0: required).
func parseSeconds(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		if def == 0 {
			return 0, web.BadRequest("%s is required: seconds, or a duration such as 48h", field)
		}
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if n, nerr := strconv.ParseInt(s, 10, 64); nerr == nil && n > 0 && n < 1<<32 {
		d, err = time.Duration(n)*time.Second, nil
	}
	if err != nil || d < time.Second || d > 10*365*24*time.Hour {
		return 0, web.BadRequest("Invalid %s %q: seconds, or a duration such as 48h, from 1s to 10 years", field, s)
	}
	return d.Truncate(time.Second), nil
}

// splitList splits a comma-separated query value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
