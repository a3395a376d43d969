package allocation

import (
	"context"
	"slices"
	"sync"
)

// batcher runs the work of concurrent callers in shared batches, the way
// group commit works: a caller queues its item; while fewer than
// maxRunning batches run, it leads one itself (the oldest queued items, up
// to maxBatch); otherwise it waits, and the items queued meanwhile go
// together in the next batch. One caller alone waits for nothing; many
// share a statement and a commit.
//
// Why it matters here: every write of an allocation notifies (conductors,
// the API processes' hubs), and PostgreSQL serializes the commits of
// notifying transactions on one lock, where dozens of clients' single-row
// transactions queued.
type batcher[T any] struct {
	maxRunning, maxBatch int
	// run does one batch: it records each item's outcome in the item.
	run func(ctx context.Context, items []*T)

	mu      sync.Mutex
	pending []*batchItem[T]
	running int // batches running, at most maxRunning
}

type batchItem[T any] struct {
	v    *T
	wake chan struct{} // capacity 1: done or lead was set
	done bool          // v holds the outcome (under batcher.mu)
	lead bool          // the caller must lead the next batch (under batcher.mu)
}

// do runs v in a batch and returns once its outcome is recorded in v. The
// batch runs under the context of the call that leads it, without its
// cancellation (its deadline stays): a client that goes away does not fail
// the others'.
func (b *batcher[T]) do(ctx context.Context, v *T) {
	it := &batchItem[T]{v: v, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, it)
	lead := b.running < b.maxRunning
	if lead {
		b.running++
	}
	b.mu.Unlock()
	for {
		if lead {
			b.lead(ctx)
		}
		b.mu.Lock()
		for !it.done && !it.lead {
			b.mu.Unlock()
			<-it.wake
			b.mu.Lock()
		}
		done := it.done
		lead, it.lead = it.lead, false
		b.mu.Unlock()
		if done {
			return
		}
	}
}

// lead runs one batch: the oldest pending items, up to maxBatch. Then it
// hands the lead to the next pending item, or gives its slot back when
// none is left.
func (b *batcher[T]) lead(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.pending), b.maxBatch)
	batch := slices.Clone(b.pending[:n])
	b.pending = slices.Delete(b.pending, 0, n)
	b.mu.Unlock()

	vs := make([]*T, len(batch))
	for i, it := range batch {
		vs[i] = it.v
	}
	bctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		bctx, cancel = context.WithDeadline(bctx, dl)
		defer cancel()
	}
	b.run(bctx, vs)

	b.mu.Lock()
	for _, it := range batch {
		it.done = true
		signal(it.wake)
	}
	if len(b.pending) > 0 {
		next := b.pending[0]
		next.lead = true
		signal(next.wake)
	} else {
		b.running--
	}
	b.mu.Unlock()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
