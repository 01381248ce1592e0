package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// core holds the state and the read methods both backends share.
//
// Two locks guard the state's two halves, so that the readers of one never
// hold up the writers of the other: meta guards resources, names,
// Operations and idempotency records (read by every API request and every
// producer send), mu guards queues, messages, leases and bodies (changed by
// every send, delivery and settlement, on the journal's writer between two
// syncs). A writer takes meta before mu; closed is set under both.
type core struct {
	meta   sync.RWMutex
	mu     sync.RWMutex
	st     *state
	closed bool
}

// rlock takes the messages' read lock unless the store is closed or ctx
// is done.
func (c *core) rlock(ctx context.Context) error { return rlockOf(ctx, &c.mu, &c.closed) }

// rlockMeta is rlock for the metadata half.
func (c *core) rlockMeta(ctx context.Context) error { return rlockOf(ctx, &c.meta, &c.closed) }

func rlockOf(ctx context.Context, l *sync.RWMutex, closed *bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.RLock()
	if *closed {
		l.RUnlock()
		return ErrClosed
	}
	return nil
}

// lock takes the write locks for changing the halves named (meta first).
func (c *core) lock(meta, msgs bool) {
	if meta {
		c.meta.Lock()
	}
	if msgs {
		c.mu.Lock()
	}
}

func (c *core) unlock(meta, msgs bool) {
	if msgs {
		c.mu.Unlock()
	}
	if meta {
		c.meta.Unlock()
	}
}

func notFound(kind, id string) error { return fmt.Errorf("%w: %s %q", ErrNotFound, kind, id) }

func (c *core) Resource(ctx context.Context, uid string) (Resource, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return Resource{}, err
	}
	defer c.meta.RUnlock()
	e := c.st.resources[uid]
	if e == nil {
		return Resource{}, notFound("resource", uid)
	}
	return cloneResource(e.r), nil
}

func (c *core) ResourceByName(ctx context.Context, space, name string) (Resource, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return Resource{}, err
	}
	defer c.meta.RUnlock()
	uid, ok := c.st.byName[nameKey{space, name}]
	if !ok {
		return Resource{}, notFound("resource", space+"/"+name)
	}
	return cloneResource(c.st.resources[uid].r), nil
}

func (c *core) Resources(ctx context.Context, space, formURL string) ([]Resource, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return nil, err
	}
	defer c.meta.RUnlock()
	return c.st.resourceList(space, formURL), nil
}

// CountResources is the number of resources space holds, without listing
// them (admission's per-space limit).
func (c *core) CountResources(ctx context.Context, space string) (int, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return 0, err
	}
	defer c.meta.RUnlock()
	return c.st.perSpace[space], nil
}

func (c *core) Operation(ctx context.Context, id string) (Operation, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return Operation{}, err
	}
	defer c.meta.RUnlock()
	e := c.st.ops[id]
	if e == nil {
		return Operation{}, notFound("operation", id)
	}
	return cloneOperation(e.o), nil
}

func (c *core) UnfinishedOperations(ctx context.Context) ([]Operation, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return nil, err
	}
	defer c.meta.RUnlock()
	return c.st.unfinished(), nil
}

var _ OperationLister = (*core)(nil)

// Operations lists a page of a space's Operations (OperationLister). It
// visits every Operation the store holds: they expire after a day.
func (c *core) Operations(ctx context.Context, q OperationQuery) ([]Operation, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return nil, err
	}
	defer c.meta.RUnlock()
	var out []Operation
	for _, e := range c.st.ops {
		o := e.o
		if o.Space != q.Space || (q.State != "" && o.State != q.State) || (q.ResourceUID != "" && o.ResourceUID != q.ResourceUID) {
			continue
		}
		if q.Before.ID != "" && !OperationBefore(o, q.Before) {
			continue
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Operation) int {
		return cmp.Or(b.CreateTime.Compare(a.CreateTime), strings.Compare(b.ID, a.ID))
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	for i := range out {
		out[i] = cloneOperation(out[i])
	}
	return out, nil
}

func (c *core) Idempotency(ctx context.Context, scope, key string) (IdempotencyRecord, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return IdempotencyRecord{}, err
	}
	defer c.meta.RUnlock()
	e := c.st.idem[idemKey{scope, key}]
	if e == nil {
		return IdempotencyRecord{}, notFound("idempotency key", key)
	}
	return e.r, nil
}

// Messages lists a queue's messages ordered by AcceptedAt, then ID.
func (c *core) Messages(ctx context.Context, queue string) ([]Message, error) {
	if err := c.rlock(ctx); err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	return c.st.messages(queue), nil
}

func (c *core) Message(ctx context.Context, queue, id string) (Message, error) {
	if err := c.rlock(ctx); err != nil {
		return Message{}, err
	}
	defer c.mu.RUnlock()
	e, ok := c.st.message(queue, id, nil)
	if !ok {
		return Message{}, notFound("message", id)
	}
	return c.st.messageOf(queue, id, e), nil
}

func (c *core) MessageCount(ctx context.Context, queue string) (int, error) {
	if err := c.rlock(ctx); err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	if q := c.st.queues[queue]; q != nil {
		return q.count(), nil
	}
	return 0, nil
}

// ResourcesView is Resources without the copies and the ordering, for a
// caller that reads many records often (the server's observer): the records
// share their byte slices with the store, which never changes them in place
// (every write replaces a record), and the caller must not change them.
func (c *core) ResourcesView(ctx context.Context, space, formURL string) ([]Resource, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return nil, err
	}
	defer c.meta.RUnlock()
	out := make([]Resource, 0, len(c.st.resources))
	for _, e := range c.st.resources {
		if (space == "" || e.r.Space == space) && (formURL == "" || e.r.FormURL == formURL) {
			out = append(out, e.r)
		}
	}
	return out, nil
}

// Body reads one message's body through s.Bodies; a message the queue does
// not hold is ErrNotFound.
func Body(ctx context.Context, s Store, queue, id string) ([]byte, error) {
	bs, err := s.Bodies(ctx, queue, []string{id})
	if err != nil {
		return nil, err
	}
	if bs[0] == nil {
		return nil, notFound("message", id)
	}
	return bs[0], nil
}

// expireBatch bounds the records one Apply of ExpireRecords removes, so
// that a first expiry of a long history is many small frames, not one
// large one.
const expireBatch = 1000

// expireRecords is ExpireRecords for both backends: it lists what has
// expired under the read lock, then removes it through apply, in batches.
// A record listed here cannot come back to life before it is removed: a
// Done Operation is never reopened, and an idempotency record is only
// listed when its Operation is Done or gone.
func (c *core) expireRecords(ctx context.Context, cutoff time.Time, apply func(context.Context, ...Mutation) error) (int, error) {
	if err := c.rlockMeta(ctx); err != nil {
		return 0, err
	}
	var muts []Mutation
	for id, e := range c.st.ops {
		if e.o.Done() && e.o.UpdateTime.Before(cutoff) {
			muts = append(muts, DeleteOperation{ID: id})
		}
	}
	for k, e := range c.st.idem {
		if !e.r.CreateTime.Before(cutoff) {
			continue
		}
		if op := c.st.ops[e.r.OperationID]; op == nil || (op.o.Done() && op.o.UpdateTime.Before(cutoff)) {
			muts = append(muts, DeleteIdempotency{Scope: k.scope, Key: k.key})
		}
	}
	c.meta.RUnlock()
	done := 0
	for len(muts) > 0 {
		n := min(len(muts), expireBatch)
		if err := apply(ctx, muts[:n]...); err != nil {
			return done, err
		}
		done += n
		muts = muts[n:]
	}
	return done, nil
}

// ExpireRecords implements Store.
func (m *Memory) ExpireRecords(ctx context.Context, cutoff time.Time) (int, error) {
	return m.expireRecords(ctx, cutoff, m.Apply)
}

// ExpireRecords implements Store.
func (s *Journaled) ExpireRecords(ctx context.Context, cutoff time.Time) (int, error) {
	return s.expireRecords(ctx, cutoff, s.Apply)
}
