package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// RequestDurationBuckets are the upper bounds, in seconds, of the
// metalloc_http_request_duration_seconds histogram: from 1 ms (a read
// served from a warm pool) to 10 s.
var RequestDurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// HTTPMetrics returns an echo middleware recording every request it wraps
// in two metrics registered on reg:
//
//	metalloc_http_requests_total{method, route, status}          counter
//	metalloc_http_request_duration_seconds{method, route}         histogram (RequestDurationBuckets)
//
// route is the matched route template ("/v1/allocations/:ident"), so that
// the label set stays bounded whatever paths clients send; a path no route
// matches is "unmatched". method is the HTTP method, or "other" for a method
// outside the standard set. status is the status code the client received,
// after the error handler ran (StatusClientClosedRequest, 499, when the
// client left before its answer): like AccessLog, the middleware renders a
// handler's error itself (c.Error) and returns nil. Install it with e.Use
// before AccessLog so that it sees the final status. It returns reg's
// error if the metrics are already registered there.
func HTTPMetrics(reg prometheus.Registerer) (echo.MiddlewareFunc, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalloc_http_requests_total",
		Help: "HTTP requests served, by method, route template and status code.",
	}, []string{"method", "route", "status"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metalloc_http_request_duration_seconds",
		Help:    "Time from receiving an HTTP request to having written its response, by method and route template.",
		Buckets: RequestDurationBuckets,
	}, []string{"method", "route"})
	for _, c := range []prometheus.Collector{requests, duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				c.Error(err)
			}
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			method := metricMethod(c.Request().Method)
			requests.WithLabelValues(method, route, strconv.Itoa(c.Response().Status)).Inc()
			duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
			return nil
		}
	}, nil
}

// metricMethod bounds the method label to the standard methods.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// MetricsHandler serves g's metrics in the Prometheus text exposition format
// (GET /metrics). Errors gathering a metric are reported in the response
// (HTTP 500), as promhttp does by default.
func MetricsHandler(g prometheus.Gatherer) echo.HandlerFunc {
	return echo.WrapHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
}
