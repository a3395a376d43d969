package node

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// shardsGate hides GET /v1/shards below 1.82 as Ironic's ShardController
// does.
var shardsGate = web.GateResource(82, "shards")

// shards is GET /v1/shards (1.82): every shard with its number of nodes,
// largest first, the nodes in no shard under the name "None", as Ironic
// lists them.
func (h *Handler) shards(c echo.Context) error {
	if err := CheckRule(c, h.opts.Rules, "baremetal:shards:get"); err != nil {
		return err
	}
	rows, err := h.store.q.ShardCounts(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		name := "None"
		if r.Shard != nil {
			name = *r.Shard
		}
		out[i] = map[string]any{"name": name, "count": r.Nodes}
	}
	return c.JSON(http.StatusOK, map[string]any{"shards": out})
}

// shard is GET /v1/shards/{name}: Ironic has no such read.
func (h *Handler) shard(echo.Context) error {
	return web.NotFound("The resource could not be found.")
}
