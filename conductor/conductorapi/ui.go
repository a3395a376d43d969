package conductorapi

import (
	"fmt"
	"math"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// Conductor states of GET /v1/ui/conductors.
const (
	// StateAlive is a conductor GET /v1/conductors reports alive.
	StateAlive = "alive"
	// StateDead is an online conductor that is not alive: its heartbeat
	// ran out while it was online (killed, hung, cut off). These are what
	// metalloc_conductors_dead counts, and their rows get taken over.
	StateDead = "dead"
	// StateStopped is a conductor that went offline cleanly (SIGTERM,
	// systemctl stop): nothing of it is left to take over.
	StateStopped = "stopped"
)

// UIConductor is one conductor of GET /v1/ui/conductors.
type UIConductor struct {
	Hostname       string `json:"hostname"`
	ConductorGroup string `json:"conductor_group"`
	// State is StateAlive, StateDead or StateStopped.
	State string `json:"state"`
	// HeartbeatAge is the seconds since its last heartbeat by the
	// database clock, while online (null once stopped).
	HeartbeatAge *float64 `json:"heartbeat_age"`
	// UpdatedAt is GET /v1/conductors' updated_at: the last heartbeat,
	// registration or going offline (RFC 3339 string).
	UpdatedAt any `json:"updated_at"`
	// Drain is DrainDraining or DrainDrained for an alive conductor asked
	// to drain (`metalloc-manage conductor drain`), else "".
	Drain string `json:"drain"`
}

// Drain states of an alive conductor in GET /v1/ui/conductors.
const (
	// DrainDraining: asked to drain; it finishes its in-flight rows.
	DrainDraining = "draining"
	// DrainDrained: it handed its rows over and idles until stopped.
	DrainDrained = "drained"
)

// uiList serves GET /v1/ui/conductors (metalloc's own, for the operator
// page; access as GET /v1/conductors): every conductor with its state,
// alive, dead or stopped. Alive is GET /v1/conductors' alive; dead and
// stopped are told apart by the metrics' read (ConductorHeartbeats, the
// online conductors): an online conductor that is not alive is dead, as
// metalloc_conductors_dead counts it, any other is stopped; an alive one
// asked to drain says how far it is (drain). Body:
// {"conductors": [UIConductor...]}.
func (h *Handler) uiList(c echo.Context) error {
	ctx := c.Request().Context()
	rows, err := h.q.ListConductors(ctx, ListConductorsParams{
		MaxRows: math.MaxInt32, SortKey: "hostname",
	})
	if err != nil {
		return fmt.Errorf("listing conductors: %w", err)
	}
	online, err := h.q.ConductorHeartbeats(ctx)
	if err != nil {
		return fmt.Errorf("reading heartbeats: %w", err)
	}
	ages := make(map[string]float64, len(online))
	for _, o := range online {
		ages[o.Hostname] = o.AgeSeconds
	}
	drains, err := h.q.ConductorDrains(ctx)
	if err != nil {
		return fmt.Errorf("reading drains: %w", err)
	}
	drain := make(map[string]string, len(drains))
	for _, d := range drains {
		drain[d.Hostname] = DrainDraining
		if d.Drained {
			drain[d.Hostname] = DrainDrained
		}
	}
	out := make([]UIConductor, len(rows))
	for i, r := range rows {
		u := UIConductor{Hostname: r.Hostname, ConductorGroup: r.ConductorGroup, State: StateStopped,
			UpdatedAt: web.Timestamp(&r.UpdatedAt)}
		if age, ok := ages[r.Hostname]; ok {
			u.HeartbeatAge = &age
			u.State = StateDead
		}
		if r.Alive {
			u.State, u.Drain = StateAlive, drain[r.Hostname]
		}
		out[i] = u
	}
	return c.JSON(http.StatusOK, map[string]any{"conductors": out})
}
