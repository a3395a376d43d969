package webtest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// SSE is a test client of a Server-Sent Events stream (GET
// /v1/allocations/events): events parsed off the body as they come.
type SSE struct {
	Resp   *http.Response
	events chan SSEEvent
	cancel context.CancelFunc
}

// SSEEvent is one event: its id, event name and JSON data.
type SSEEvent struct {
	ID, Kind string
	Data     map[string]any
}

// OpenSSE sends a GET of url with Accept: text/event-stream and the given
// headers, and returns the stream once the answer's headers are in (any
// status: check Resp.StatusCode). The request is ended at the test's end.
func OpenSSE(t testing.TB, url string, hdr map[string]string) *SSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &SSE{Resp: resp, events: make(chan SSEEvent, 1000), cancel: cancel}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev SSEEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Kind != "" {
					s.events <- ev
				}
				ev = SSEEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Kind = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.Data)
			}
		}
	})
	t.Cleanup(func() { cancel(); resp.Body.Close(); wg.Wait() })
	return s
}

// Close ends the stream (the client goes away).
func (s *SSE) Close() {
	s.cancel()
	s.Resp.Body.Close()
}

// Next returns the stream's next n events (failing the test after 30 s).
func (s *SSE) Next(t testing.TB, n int) []SSEEvent {
	t.Helper()
	var out []SSEEvent
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended after %v", out)
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("got %d of %d events: %v", len(out), n, out)
		}
	}
	return out
}

// Quiet fails the test if an event arrives within d.
func (s *SSE) Quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if ok {
			t.Fatalf("unexpected event %v", e)
		}
	case <-time.After(d):
	}
}

// Summary is "kind name state" per event, for comparisons.
func Summary(evs []SSEEvent) []string {
	var out []string
	for _, e := range evs {
		name, _ := e.Data["name"].(string)
		state, _ := e.Data["state"].(string)
		out = append(out, e.Kind+" "+name+" "+state)
	}
	return out
}
