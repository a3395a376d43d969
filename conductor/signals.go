package conductor

// testSignals lets tests wait for the conductor's events instead of sleeping
// (River's testsignal idea). Production code leaves Service.signals nil, and
// every send is then a no-op; a test sets it with buffered channels before
// Run, and a send never blocks the conductor (a full channel drops the
// event).
type testSignals struct {
	// heartbeat receives one value per heartbeat written.
	heartbeat chan struct{}
	// takeover receives, after each takeover run, how many rows it won.
	takeover chan int
}

// newTestSignals returns signals with room for n events of each kind.
func newTestSignals(n int) *testSignals {
	return &testSignals{heartbeat: make(chan struct{}, n), takeover: make(chan int, n)}
}

func (s *testSignals) heartbeatWritten() {
	if s != nil {
		select {
		case s.heartbeat <- struct{}{}:
		default:
		}
	}
}

func (s *testSignals) takeoverRan(won int) {
	if s != nil {
		select {
		case s.takeover <- won:
		default:
		}
	}
}
