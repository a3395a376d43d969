package allocation

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// pollMarks remembers when each allocation still allocating was last
// answered to a GET, to tell a client polling it (the next GET within the
// window) from one looking once (Handler.get). Entries older than the
// window are pruned when the map has grown, at most once per window.
type pollMarks struct {
	window time.Duration
	mu     sync.Mutex
	at     map[uuid.UUID]time.Time
	pruned time.Time
}

// pollMarksPrune is the size past which pollMarks prunes old entries.
const pollMarksPrune = 4096

func newPollMarks(window time.Duration) *pollMarks {
	return &pollMarks{window: window, at: map[uuid.UUID]time.Time{}}
}

// polling reports whether u was answered less than the window before now.
func (p *pollMarks) polling(u uuid.UUID, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.at[u]
	return ok && now.Sub(at) < p.window
}

// answered records the answer to a GET of u at now: marked while u is
// still allocating, forgotten once it is not.
func (p *pollMarks) answered(u uuid.UUID, allocating bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !allocating {
		delete(p.at, u)
		return
	}
	if len(p.at) >= pollMarksPrune && now.Sub(p.pruned) >= p.window {
		for k, at := range p.at {
			if now.Sub(at) >= p.window {
				delete(p.at, k)
			}
		}
		p.pruned = now
	}
	p.at[u] = now
}
