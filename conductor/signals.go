package conductor

import "github.com/google/uuid"

// testSignals lets tests wait for the conductor's events instead of sleeping
// (River's testsignal idea). Production code leaves Service.signals nil, and
// every send is then a no-op; a test sets it with buffered channels before
// Run, and a send never blocks the conductor (a full channel drops the
// event). Tests that run conductors as processes (e2e) wait for the log
// line each event also writes: "reserving allocation" (debug), "allocation
// waiting for a locked node" (debug), "stopping: finishing in-flight
// allocations" (info), "released unfinished allocations to the other
// conductors" (info), "conductor drained: idle until stopped" (info).
type testSignals struct {
	// heartbeat receives one value per heartbeat written.
	heartbeat chan struct{}
	// takeover receives, after each takeover run, how many rows it won.
	takeover chan int
	// claimed receives, after each claim statement, how many rows it took
	// (reserved or not; 0 when it found none).
	claimed chan int
	// reserving receives the uuid of each claimed row a worker starts
	// processing (the slow path: Backend.Process).
	reserving chan uuid.UUID
	// waiting receives the uuid of each row that starts waiting for a
	// locked node (Backend.Process said Waiting for the first time; park).
	waiting chan uuid.UUID
	// stopping receives one value when a stop begins (Run's context ended;
	// in-flight work gets ShutdownGrace).
	stopping chan struct{}
	// released receives, on a clean stop, how many unfinished rows and
	// groups the conductor handed back (after Rows.Release).
	released chan int64
	// drained receives, once a drain has released the rows the conductor
	// did not finish, how many it handed back (idleDrained).
	drained chan int64
}

// send delivers v on ch unless ch is full; nothing when s is nil.
func send[T any](s *testSignals, ch func(*testSignals) chan T, v T) {
	if s == nil {
		return
	}
	select {
	case ch(s) <- v:
	default:
	}
}

func (s *testSignals) heartbeatWritten() {
	send(s, func(s *testSignals) chan struct{} { return s.heartbeat }, struct{}{})
}

func (s *testSignals) takeoverRan(won int) {
	send(s, func(s *testSignals) chan int { return s.takeover }, won)
}

func (s *testSignals) claimedRows(n int) {
	send(s, func(s *testSignals) chan int { return s.claimed }, n)
}

func (s *testSignals) reservingRow(u uuid.UUID) {
	send(s, func(s *testSignals) chan uuid.UUID { return s.reserving }, u)
}

func (s *testSignals) waitingRow(u uuid.UUID) {
	send(s, func(s *testSignals) chan uuid.UUID { return s.waiting }, u)
}

func (s *testSignals) stoppingNow() {
	send(s, func(s *testSignals) chan struct{} { return s.stopping }, struct{}{})
}

func (s *testSignals) releasedRows(n int64) {
	send(s, func(s *testSignals) chan int64 { return s.released }, n)
}

func (s *testSignals) drainedNow(n int64) {
	send(s, func(s *testSignals) chan int64 { return s.drained }, n)
}
