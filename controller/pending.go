package controller

import (
	"context"
	"github.com/takoform/queuehost/problem"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// Why admission does not hold the space's lock across the journal's sync:
// the checks of an admission and the reservation of what it decided run
// under the space's lock; the first Apply (which waits for its fsync) runs
// after the lock is released. What a decided admission will write is
// reserved in memory first (its record, its name, one more resource in the
// space, its idempotency key, its resource as busy), and admissions read
// the reservations with the store, so the next admission of the space is
// checked against it at once and group commit can share one fsync between
// the admissions of a space. A reservation whose Apply fails is withdrawn;
// no admission depended on it succeeding (a reference to a resource whose
// create has not finished is refused anyway).
type pendingSet struct {
	mu      sync.Mutex
	records map[string]store.Resource
	names   map[nameKey]string
	creates map[string]int
	keys    map[idemKey]chan struct{}
}

type nameKey struct{ space, name string }
type idemKey struct{ scope, key string }

// reservation is one admission's reservation.
type reservation struct {
	uid    string
	rec    *store.Resource // nil for a no-op update
	create bool
	key    idemKey
	done   chan struct{} // closed when the reservation ends; nil without a key
}

func (p *pendingSet) init() {
	if p.records == nil {
		p.records = map[string]store.Resource{}
		p.names = map[nameKey]string{}
		p.creates = map[string]int{}
		p.keys = map[idemKey]chan struct{}{}
	}
}

func (p *pendingSet) reserve(pl plan) *reservation {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	r := &reservation{uid: pl.uid, create: pl.kind == KindCreate}
	if !pl.noop {
		rec := pl.record
		r.rec = &rec
		p.records[pl.uid] = rec
		if r.create {
			p.names[nameKey{pl.space, rec.Name}] = pl.uid
			p.creates[pl.space]++
		}
	}
	if pl.idem.Key != "" {
		r.key, r.done = idemKey{pl.idem.Scope, pl.idem.Key}, make(chan struct{})
		p.keys[r.key] = r.done
	}
	return r
}

func (p *pendingSet) release(space string, r *reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.rec != nil {
		delete(p.records, r.uid)
		if r.create {
			if k := (nameKey{space, r.rec.Name}); p.names[k] == r.uid {
				delete(p.names, k)
			}
			if p.creates[space]--; p.creates[space] <= 0 {
				delete(p.creates, space)
			}
		}
	}
	if r.done != nil {
		delete(p.keys, r.key)
		close(r.done)
	}
}

func (p *pendingSet) record(uid string) (store.Resource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.records[uid]
	return r, ok
}

func (p *pendingSet) name(space, name string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.names[nameKey{space, name}]
	return uid, ok
}

func (p *pendingSet) createsIn(space string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.creates[space]
}

// key is the channel closed when the admission that reserved ir ends, or
// nil.
func (p *pendingSet) key(ir Idempotency) <-chan struct{} {
	if ir.Key == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[idemKey{ir.Scope, ir.Key}]
}

// readRecord reads a resource record, a reserved one first.
func (c *Controller) readRecord(ctx context.Context, uid string) (store.Resource, error) {
	if r, ok := c.pending.record(uid); ok {
		return r, nil
	}
	return c.st.Resource(ctx, uid)
}

// lockSpace takes space's lock for an admission with idem: when another
// admission with the same key is being written, it waits for it, so that
// the key's replay finds its Operation. prior is that Operation to replay.
// The returned unlock may be called more than once.
func (c *Controller) lockSpace(ctx context.Context, space string, idem Idempotency) (unlock func(), prior *store.Operation, err error) {
	for {
		release := c.spaces.lock(space)
		if c.opts.SharedLock != nil {
			// Several hosts on one store: the space's lock is also
			// the store's, held until the admission's write is done.
			local := release
			shared, err := c.opts.SharedLock(ctx, space)
			if err != nil {
				local()
				return nil, nil, problem.Unavailable(err)
			}
			release = func() { shared(); local() }
			// What other hosts admitted in the space is in the store:
			// the reference index (dependency and dead-letter checks)
			// reads it now.
			if err := c.reindexSpace(ctx, space); err != nil {
				release()
				return nil, nil, problem.Unavailable(err)
			}
		}
		var once sync.Once
		unlock = func() { once.Do(release) }
		if ch := c.pending.key(idem); ch != nil {
			unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		prior, err = c.replay(ctx, idem)
		if err != nil || prior != nil {
			unlock()
			return nil, prior, err
		}
		return unlock, nil, nil
	}
}
