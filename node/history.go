package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// Node history: the events Ironic records for a node with
// conductor/utils.py node_history_record and shows at
// /v1/nodes/{ident}/history (1.78). Ironic records failures (severity
// ERROR, the same text as last_error: power actions, deploy, tear down,
// cleaning, an aborted inspection) and a few notices (severity INFO, an
// aborted rescue); a transition that succeeds leaves no event. metalloc
// records the same events, in the transaction that changed the node, with
// the API host's name where Ironic names its conductor and the caller's
// user id when there is one.

// Event types (Ironic's common/states.py history event types).
const (
	eventUnknown       = "UNKNOWN"
	eventDeploying     = "deploying"
	eventCleaning      = "cleaning"
	eventUnprovision   = "unprovision"
	eventIntrospection = "introspection"
	eventRescue        = "rescue"
)

// historyEvent is an event recorded with the node's next write.
type historyEvent struct {
	eventType, severity, event string
}

// fail records a failure as Ironic's node_history_record(error=True):
// last_error is set to msg and an ERROR event of eventType is recorded.
func (n *Node) fail(eventType, msg string) {
	n.LastError = &msg
	n.history = append(n.history, historyEvent{eventType, "ERROR", msg})
}

// notice records an INFO event that does not touch last_error.
func (n *Node) notice(eventType, msg string) {
	n.history = append(n.history, historyEvent{eventType, "INFO", msg})
}

// historyHost is the name recorded as the event's conductor.
var historyHost = func() string {
	h, err := os.Hostname()
	if err != nil {
		return "metalloc-api"
	}
	return h
}()

// writeHistory inserts the events n recorded.
func writeHistory(ctx context.Context, q *Queries, n Node) error {
	var user *string
	if id := auth.Caller(ctx).UserID; id != "" {
		user = &id
	}
	for _, e := range n.history {
		err := q.InsertNodeHistory(ctx, InsertNodeHistoryParams{
			Uuid: uuid.New(), NodeID: n.ID, ConductorHost: &historyHost, Event: e.event,
			EventType: ptr(e.eventType), Severity: ptr(e.severity), UserID: user,
		})
		if err != nil {
			return fmt.Errorf("recording history of node %s: %w", n.UUID, err)
		}
	}
	return nil
}

// renderHistory is one event as NodeHistoryController shows it: a list
// entry (detail false) has its event cut to 255 characters.
func renderHistory(base string, nodeUUID uuid.UUID, r ListNodeHistoryRow, detail bool) map[string]any {
	event := r.Event
	if !detail && len([]rune(event)) > 255 {
		event = string([]rune(event)[:251]) + "..."
	}
	path := "/nodes/" + nodeUUID.String() + "/history/" + r.Uuid.String()
	doc := map[string]any{
		"uuid": r.Uuid.String(), "created_at": web.Timestamp(&r.CreatedAt), "severity": str(r.Severity),
		"event": event, "links": []web.Link{{Href: base + "/v1" + path, Rel: "self"}},
	}
	if detail {
		doc["event_type"], doc["conductor"], doc["user"] = str(r.EventType), str(r.ConductorHost), str(r.UserID)
	}
	return doc
}

// listHistory is GET /nodes/{ident}/history (?detail, ?marker, ?limit):
// oldest first, with a next link when the page is full.
func (h *Handler) listHistory(c echo.Context, n *Node, _ map[string]any) error {
	ctx := c.Request().Context()
	q := c.QueryParams()
	detail := false
	if q.Has("detail") {
		b, err := parseBool("detail", q.Get("detail"))
		if err != nil {
			return apiError(err, "")
		}
		detail = b
	}
	limit := h.opts.MaxLimit
	if q.Has("limit") {
		l, err := strconv.Atoi(strings.TrimSpace(q.Get("limit")))
		if err != nil {
			return web.BadRequest("Expected an integer for limit: %s", q.Get("limit"))
		}
		if l <= 0 {
			return web.BadRequest("Limit must be positive")
		}
		limit = min(l, h.opts.MaxLimit)
	}
	var after int64
	if q.Has("marker") {
		m, err := parseUUIDArg("marker", q.Get("marker"))
		if err != nil {
			return apiError(err, "")
		}
		r, err := h.store.q.GetNodeHistory(ctx, GetNodeHistoryParams{NodeID: n.ID, Uuid: m})
		if errors.Is(err, pgx.ErrNoRows) {
			return web.NotFound("Node history record %s could not be found.", m)
		}
		if err != nil {
			return err
		}
		after = r.ID
	}
	rows, err := h.store.q.ListNodeHistory(ctx, ListNodeHistoryParams{NodeID: n.ID, AfterID: after, MaxRows: int32(limit)})
	if err != nil {
		return err
	}
	base := h.base(c)
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		out[i] = renderHistory(base, n.UUID, r, detail)
	}
	resp := map[string]any{"history": out}
	if len(rows) > 0 {
		keep := map[string][]string{}
		if q.Has("detail") {
			keep["detail"] = []string{q.Get("detail")}
		}
		if next := web.NextLink(base, "nodes/"+web.PathIdent(c)+"/history", len(rows), limit,
			rows[len(rows)-1].Uuid.String(), keep); next != "" {
			resp["next"] = next
		}
	}
	return c.JSON(http.StatusOK, resp)
}

// getHistory is GET /nodes/{ident}/history/{event}: one event, in detail.
func (h *Handler) getHistory(c echo.Context, n *Node, _ map[string]any) error {
	event := c.Param("event")
	if !isUUIDLike(event) && !isValidLogicalName(event) {
		return web.BadRequest("Expected UUID or name for event: %s", event)
	}
	u, err := uuid.Parse(event)
	if err != nil {
		return web.NotFound("Node history record %s could not be found.", event)
	}
	r, err := h.store.q.GetNodeHistory(c.Request().Context(), GetNodeHistoryParams{NodeID: n.ID, Uuid: u})
	if errors.Is(err, pgx.ErrNoRows) {
		return web.NotFound("Node history record %s could not be found.", event)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, renderHistory(h.base(c), n.UUID, ListNodeHistoryRow(r), true))
}
