package cli

import (
	"context"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// Systemd reports a daemon's life cycle to systemd through sd_notify (units
// with Type=notify, see configs/systemd): READY=1 when Ready is called,
// STOPPING=1 as soon as the stop context ends (the first SIGTERM or SIGINT),
// and WATCHDOG=1 every half of WatchdogSec= while the unit enables the
// watchdog (WATCHDOG_USEC and WATCHDOG_PID naming this process). Outside
// systemd (no NOTIFY_SOCKET) every notification is a no-op.
//
// The watchdog ping proves the process is alive and scheduling goroutines;
// it deliberately does not depend on the database, so an outage of
// PostgreSQL does not make systemd restart every daemon in a loop.
type Systemd struct {
	log  *zap.Logger
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	ready    bool
	stopping bool
	closed   bool
}

// StartSystemd starts the STOPPING=1 watcher on stop (normally Service.Ctx)
// and, when the unit enables it, the watchdog pinger. Call Ready once the
// daemon serves, and Close before exiting.
func StartSystemd(stop context.Context, log *zap.Logger) *Systemd {
	s := &Systemd{log: log, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-stop.Done():
			s.mu.Lock()
			s.stopping = true
			s.notify(daemon.SdNotifyStopping)
			s.mu.Unlock()
		case <-s.done:
		}
	}()
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings unreadable; not pinging", zap.Error(err))
	}
	if interval > 0 {
		log.Info("systemd watchdog enabled", zap.Duration("timeout", interval), zap.Duration("ping_every", interval/2))
		s.wg.Add(1)
		go s.watchdog(interval / 2)
	}
	return s
}

// watchdog sends WATCHDOG=1 every period until Close, including while the
// daemon shuts down.
func (s *Systemd) watchdog(period time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	s.notify(daemon.SdNotifyWatchdog)
	for {
		select {
		case <-t.C:
			s.notify(daemon.SdNotifyWatchdog)
		case <-s.done:
			return
		}
	}
}

// Ready sends READY=1 once; it does nothing after a stop began (systemd is
// already stopping the unit) or a second time. READY=1 and STOPPING=1 are
// sent under one lock, so systemd never sees READY=1 after STOPPING=1.
func (s *Systemd) Ready() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready && !s.stopping && !s.closed {
		s.notify(daemon.SdNotifyReady)
	}
	s.ready = true
}

// Close stops the watcher and the watchdog pinger. It is safe to call more
// than once.
func (s *Systemd) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.wg.Wait()
}

// notify sends state to systemd; failures are logged, never fatal.
func (s *Systemd) notify(state string) {
	sent, err := daemon.SdNotify(false, state)
	switch {
	case err != nil:
		s.log.Warn("sd_notify failed", zap.String("state", state), zap.Error(err))
	case sent && state != daemon.SdNotifyWatchdog:
		s.log.Info("sd_notify", zap.String("state", state))
	}
}
