package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// The probe paths every metalloc daemon answers (metalloc-api and
// metalloc-placement on their listener, metalloc-conductor on its metrics
// listener). Neither Ironic nor Placement has a route of these names.
const (
	// HealthzPath is liveness: 200 while the process serves HTTP.
	HealthzPath = "/healthz"
	// ReadyzPath is readiness: 200 when every readiness check passes
	// (database reachable, schema this binary's, ...), else 503 with
	// Retry-After: UnavailableRetryAfter.
	ReadyzPath = "/readyz"
)

// ReadyTimeout bounds one /readyz answer (all its checks).
const ReadyTimeout = 3 * time.Second

// Check is one readiness condition of a daemon.
type Check struct {
	// Name labels the check in /readyz's body ("database").
	Name string
	// Func returns nil when the condition holds, else an error whose
	// message is shown to the (unauthenticated) prober: keep it free of
	// secrets and addresses.
	Func func(ctx context.Context) error
}

// HealthBody is the JSON body of /healthz and /readyz: status "ok" or
// "unavailable", and for /readyz each check's "ok" or failure message.
type HealthBody struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks,omitempty"`
}

// Health serves /healthz and /readyz (GET and HEAD) in front of next and
// passes every other request on. The probes are answered before next's
// routing: without authentication (load balancers, kubelets and systemd
// carry no credentials), and outside the access log and HTTP metrics
// (probes every few seconds would drown them). /readyz runs checks in
// order, each bounded by ReadyTimeout, and reports all of them; its 503
// says when to ask again (Retry-After: UnavailableRetryAfter seconds).
func Health(next http.Handler, checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != HealthzPath && r.URL.Path != ReadyzPath {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, status := HealthBody{Status: "ok"}, http.StatusOK
		if r.URL.Path == ReadyzPath {
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			body.Checks = map[string]string{}
			for _, c := range checks {
				res := "ok"
				if err := c.Func(ctx); err != nil {
					res, body.Status, status = err.Error(), "unavailable", http.StatusServiceUnavailable
				}
				body.Checks[c.Name] = res
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(UnavailableRetryAfter))
		}
		w.WriteHeader(status)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(body)
		}
	})
}
