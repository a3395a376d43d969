package conductor

import "github.com/google/uuid"

// newTestSignals returns signals with room for n events of each kind.
func newTestSignals(n int) *testSignals {
	return &testSignals{heartbeat: make(chan struct{}, n), takeover: make(chan int, n), claimed: make(chan int, n),
		reserving: make(chan uuid.UUID, n), waiting: make(chan uuid.UUID, n), stopping: make(chan struct{}, n),
		released: make(chan int64, n), drained: make(chan int64, n)}
}
