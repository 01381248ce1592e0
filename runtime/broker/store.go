package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// Options configure a Store.
type Options struct {
	// Drivers maps an Offering name to its broker (host configuration:
	// -broker NAME=URL). A queue whose Offering is one of them keeps its
	// messages there.
	Drivers map[string]Driver
	Logger  *slog.Logger
	// RefreshAfter is how long a copy may stay delivered to this host
	// before it is republished (a new copy, then an ack of the old):
	// RabbitMQ closes a channel whose delivery stays unacknowledged past
	// its consumer_timeout (30 min by default), and an SQS copy's
	// visibility would run out. Default 10 minutes.
	RefreshAfter time.Duration
	// HandleWait bounds how long a removal waits for the copy it removes
	// to arrive from the broker (a copy just published is on its way back
	// to this host's consumer). Default 10 s; past it the removal fails
	// with store.ErrUnavailable and changes nothing.
	HandleWait time.Duration
	// DrainWait bounds how long the first read of a queue's messages
	// waits for the copies waiting on the broker to arrive. Default 10 s.
	DrainWait time.Duration
}

// Store is a store.Store whose broker queues' messages live on their
// brokers; everything else (resources, Operations, idempotency records and
// the messages of the other queues) is the inner store's. See the package
// documentation.
type Store struct {
	store.Store
	opt Options
	log *slog.Logger

	mu     sync.Mutex
	queues map[string]*bqueue // queue UID
	adopt  func(uid string, ms []store.Message) int
	closed bool
	stopRf chan struct{}
	rfDone chan struct{}
}

var _ store.Store = (*Store)(nil)

// New wraps inner. Call SetAdopter before the engine starts.
func New(inner store.Store, opt Options) *Store {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.RefreshAfter <= 0 {
		opt.RefreshAfter = 10 * time.Minute
	}
	if opt.HandleWait <= 0 {
		opt.HandleWait = 10 * time.Second
	}
	if opt.DrainWait <= 0 {
		opt.DrainWait = 10 * time.Second
	}
	s := &Store{Store: inner, opt: opt, log: opt.Logger, queues: map[string]*bqueue{}, stopRf: make(chan struct{}), rfDone: make(chan struct{})}
	go s.refreshLoop()
	return s
}

// SetAdopter sets what is told of messages that arrive from the broker
// after the engine read the queue (a producer other than this host, or a
// copy left by an earlier run): the delivery engine's Adopt.
func (s *Store) SetAdopter(f func(uid string, ms []store.Message) int) {
	s.mu.Lock()
	s.adopt = f
	s.mu.Unlock()
}

// Offerings lists the broker Offerings, sorted.
func (s *Store) Offerings() []string {
	out := make([]string, 0, len(s.opt.Drivers))
	for k := range s.opt.Drivers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// QueueName is the broker's name of a queue resource: tako-SPACE-NAME-UID,
// readable in the broker's own tools, unique by the UID (a queue deleted
// and created again under its name gets a new broker queue), and within
// the characters and 80 bytes SQS allows.
func QueueName(r store.Resource) string {
	n := unsafeName.ReplaceAllString("tako-"+r.Space+"-"+r.Name, "_")
	uid := unsafeName.ReplaceAllString(r.UID, "_")
	if max := 80 - len(uid) - 1; len(n) > max {
		n = n[:max]
	}
	return n + "-" + uid
}

// bqueue is one broker queue as this host holds it: every copy delivered
// to this host and not acknowledged, by message ID.
type bqueue struct {
	s       *Store
	q       Queue
	d       Driver
	mu      sync.Mutex
	entries map[string]*entry
	// gone: messages removed in this run; any copy of them that arrives
	// is acknowledged (its ack was lost, or it was published by a write
	// that failed).
	gone    map[string]struct{}
	arrived chan struct{} // closed and replaced whenever a handle arrives
	stop    func()
	loaded  bool // the engine read the queue: later arrivals are adopted
	deleted bool // the broker reported the queue gone
}

type entry struct {
	cur      Envelope // the current copy's state, body included
	h        any      // the current copy's handle; nil until it arrives
	since    time.Time
	issued   int64          // highest revision published
	inflight map[int64]bool // revisions being published by a write
	pending  map[int64]any  // handles of in-flight revisions that arrived
	lease    string
}

func (s *Store) driverOf(r store.Resource) Driver {
	if r.FormURL != schemas.FormAtLeastOnceQueue {
		return nil
	}
	return s.opt.Drivers[r.Offering]
}

// queueFor is the broker queue of a queue UID, nil for a queue of the
// inner store. It registers (and starts consuming) a broker queue on
// first use.
func (s *Store) queueFor(ctx context.Context, uid string) (*bqueue, error) {
	s.mu.Lock()
	bq, ok := s.queues[uid]
	s.mu.Unlock()
	if ok {
		return bq, nil
	}
	r, err := s.Store.Resource(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d := s.driverOf(r)
	if d == nil {
		return nil, nil
	}
	return s.register(r, d)
}

func (s *Store) register(r store.Resource, d Driver) (*bqueue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	if bq, ok := s.queues[r.UID]; ok {
		return bq, nil
	}
	bq := &bqueue{s: s, q: Queue{UID: r.UID, Name: QueueName(r)}, d: d, entries: map[string]*entry{}, gone: map[string]struct{}{}, arrived: make(chan struct{})}
	stop, err := d.Consume(bq.q, Consumer{Deliver: bq.deliver, Lost: bq.lost, Gone: bq.goneQueue})
	if err != nil {
		return nil, fmt.Errorf("%w: consuming %s: %w", store.ErrUnavailable, bq.q.Name, err)
	}
	bq.stop = stop
	s.queues[r.UID] = bq
	return bq, nil
}

// deliver takes one copy from the broker.
func (bq *bqueue) deliver(d Delivery) {
	var ack []any
	var adopt []store.Message
	bq.mu.Lock()
	if d.Foreign {
		// Another producer's message: it becomes a message of the queue
		// with an ID and an envelope of its own once republished (below).
		bq.mu.Unlock()
		bq.adoptForeign(d)
		return
	}
	id := d.ID
	if _, gone := bq.gone[id]; gone {
		ack = append(ack, d.Handle)
	} else if e := bq.entries[id]; e == nil {
		e = &entry{cur: d.Envelope, h: d.Handle, since: time.Now(), issued: d.Rev}
		bq.entries[id] = e
		if bq.loaded {
			adopt = append(adopt, e.message(bq.q.UID))
		}
	} else {
		switch r := d.Rev; {
		case r == e.cur.Rev:
			if e.h != nil {
				ack = append(ack, d.Handle) // a second copy of the same revision
			} else {
				e.h, e.since = d.Handle, time.Now()
			}
		case r > e.issued:
			// A newer copy left by an earlier run that crashed between
			// publishing it and acknowledging the older one.
			if e.h != nil {
				ack = append(ack, e.h)
			}
			e.cur, e.h, e.issued, e.since = d.Envelope, d.Handle, r, time.Now()
		case r > e.cur.Rev && e.inflight[r]:
			if e.pending == nil {
				e.pending = map[int64]any{}
			}
			e.pending[r] = d.Handle
		default:
			ack = append(ack, d.Handle) // stale: superseded, or its write failed
		}
	}
	close(bq.arrived)
	bq.arrived = make(chan struct{})
	bq.mu.Unlock()
	if len(ack) > 0 {
		bq.ackQuietly(ack)
	}
	if len(adopt) > 0 {
		bq.s.mu.Lock()
		f := bq.s.adopt
		bq.s.mu.Unlock()
		if f != nil {
			f(bq.q.UID, adopt)
		}
	}
}

// adoptForeign republishes a message another producer put on the queue
// with an envelope (a new ID, accepted now, attempts 0), then
// acknowledges the original; the new copy arrives like any other.
func (bq *bqueue) adoptForeign(d Delivery) {
	now := time.Now().UnixMilli()
	env := Envelope{ID: newID(), AcceptedAt: now, VisibleAt: now, Rev: 1, Body: d.Body}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bq.d.Publish(ctx, bq.q, []Envelope{env}); err != nil {
		bq.s.log.Warn("broker: adopting a message published by another producer failed; it is redelivered", "queue", bq.q.Name, "err", err)
		return
	}
	bq.ackQuietly([]any{d.Handle})
}

func (bq *bqueue) ackQuietly(hs []any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bq.d.Ack(ctx, bq.q, hs); err != nil {
		bq.s.log.Debug("broker: acknowledging a superseded copy failed; it is acknowledged when it arrives again", "queue", bq.q.Name, "err", err)
	}
}

// lost forgets every handle: the broker redelivers those copies.
func (bq *bqueue) lost() {
	bq.mu.Lock()
	for _, e := range bq.entries {
		e.h = nil
		e.pending = nil
	}
	bq.mu.Unlock()
}

func (bq *bqueue) goneQueue() {
	bq.mu.Lock()
	bq.deleted = true
	bq.mu.Unlock()
	bq.s.log.Warn("broker: the queue was deleted on the broker", "queue", bq.q.Name)
}

func (e *entry) message(uid string) store.Message {
	return store.Message{Queue: uid, ID: e.cur.ID, AcceptedAt: e.cur.AcceptedAt, VisibleAt: e.cur.VisibleAt,
		Attempts: e.cur.Attempts, Lease: e.lease, Size: len(e.cur.Body), DeadLetter: e.cur.DeadLetter, TraceParent: e.cur.TraceParent, History: e.cur.History}
}

// change is the state one Apply leaves a broker message in.
type change struct {
	bq      *bqueue
	id      string
	env     Envelope
	lease   string
	existed bool
	removed bool
	publish bool // a new copy is published (rev = env.Rev)
	noWait  bool // a removal that does not wait for the copy to arrive (a purge)
}

// Apply makes the broker queues' message mutations durable on their
// brokers and the rest in the inner store: first every new copy is
// published and confirmed, then the inner store's mutations are applied,
// then the copies they replace or remove are acknowledged, so that the
// broker never forgets a message before its next state is durable.
func (s *Store) Apply(ctx context.Context, muts ...store.Mutation) error {
	var rest []store.Mutation
	var after []func()
	work := map[*bqueue]map[string]*change{}
	var order []*change
	get := func(bq *bqueue, id string) *change {
		m := work[bq]
		if m == nil {
			m = map[string]*change{}
			work[bq] = m
		}
		c := m[id]
		if c == nil {
			c = &change{bq: bq, id: id}
			bq.mu.Lock()
			if e := bq.entries[id]; e != nil {
				c.env, c.lease, c.existed = e.cur, e.lease, true
			}
			bq.mu.Unlock()
			m[id] = c
			order = append(order, c)
		}
		return c
	}
	for _, mut := range muts {
		// A message mutation of a broker queue is the broker's; of
		// another queue, the inner store's.
		var bq *bqueue
		if uid, ok := messageQueue(mut); ok {
			var err error
			if bq, err = s.queueFor(ctx, uid); err != nil {
				return err
			}
			if bq == nil {
				rest = append(rest, mut)
				continue
			}
		}
		switch m := mut.(type) {
		case store.PutResource:
			if d := s.driverOf(m.Resource); d != nil {
				if err := d.Declare(ctx, Queue{UID: m.Resource.UID, Name: QueueName(m.Resource)}); err != nil {
					return fmt.Errorf("%w: declaring the queue on broker %q: %w", store.ErrUnavailable, m.Resource.Offering, err)
				}
				r := m.Resource
				after = append(after, func() {
					if _, err := s.register(r, d); err != nil {
						s.log.Warn("broker: consuming a queue failed; it is retried on its first read", "queue", r.UID, "err", err)
					}
				})
			}
			rest = append(rest, m)
		case store.DeleteResource:
			// A queue resource's record goes: so does its broker queue.
			bq, err := s.queueFor(ctx, m.UID)
			if err != nil {
				return err
			}
			if bq != nil {
				after = append(after, func() { s.drop(bq) })
			}
			rest = append(rest, m)
		case store.DropQueue:
			// Every message of the queue goes (a delete, a purge): the
			// copies this host holds are acknowledged (those on their
			// way back are when they arrive), then the broker purges
			// what waits on it.
			bq.mu.Lock()
			held := make([]string, 0, len(bq.entries))
			for id := range bq.entries {
				held = append(held, id)
			}
			bq.mu.Unlock()
			for _, id := range held {
				c := get(bq, id)
				c.removed, c.publish, c.noWait = true, false, true
			}
			after = append(after, func() {
				if _, err := bq.d.Purge(ctx, bq.q); err != nil && !errors.Is(err, ErrQueueGone) {
					s.log.Warn("broker: purging the messages waiting on the broker failed; they are delivered when they arrive", "queue", bq.q.Name, "err", err)
				}
			})
		case store.AcceptMessage:
			c := get(bq, m.Message.ID)
			c.env = Envelope{ID: m.Message.ID, AcceptedAt: m.Message.AcceptedAt, VisibleAt: m.Message.VisibleAt, Attempts: m.Message.Attempts,
				DeadLetter: m.Message.DeadLetter, TraceParent: m.Message.TraceParent, History: m.Message.History, Body: append([]byte(nil), m.Body...), Rev: c.env.Rev}
			c.lease, c.removed, c.publish = m.Message.Lease, false, true
		case store.DeliverMessages:
			for _, id := range m.IDs {
				if c := get(bq, id); (c.existed || c.publish) && !c.removed {
					c.env.Attempts++
					c.lease, c.publish = m.Batch, true
				}
			}
		case store.RetryMessage:
			if c := get(bq, m.ID); (c.existed || c.publish) && !c.removed {
				c.lease = ""
				if c.env.VisibleAt != m.VisibleAt {
					c.env.VisibleAt, c.publish = m.VisibleAt, true
				}
				if m.Attempt != nil {
					c.env.History, c.publish = store.AppendAttempt(c.env.History, *m.Attempt), true
				}
			}
		case store.RemoveMessages:
			for _, id := range m.IDs {
				c := get(bq, id)
				c.removed, c.publish = true, false
			}
		default:
			rest = append(rest, m)
		}
	}
	if err := s.commit(ctx, order, rest); err != nil {
		return err
	}
	for _, f := range after {
		f()
	}
	return nil
}

// messageQueue is the queue a message mutation changes.
func messageQueue(m store.Mutation) (string, bool) {
	switch m := m.(type) {
	case store.AcceptMessage:
		return m.Message.Queue, true
	case store.DeliverMessages:
		return m.Queue, true
	case store.RetryMessage:
		return m.Queue, true
	case store.RemoveMessages:
		return m.Queue, true
	case store.DropQueue:
		return m.Queue, true
	}
	return "", false
}

// commit carries out the changes (see Apply).
func (s *Store) commit(ctx context.Context, order []*change, rest []store.Mutation) error {
	// The copies a removal acknowledges must have arrived: wait for them
	// first, so that a failure changes nothing.
	if err := s.awaitHandles(ctx, order); err != nil {
		return err
	}
	pubs := map[*bqueue][]Envelope{}
	var published []*change
	for _, c := range order {
		if !c.publish || c.removed {
			continue
		}
		bq := c.bq
		bq.mu.Lock()
		e := bq.entries[c.id]
		if e == nil {
			if _, gone := bq.gone[c.id]; gone && !c.existed {
				delete(bq.gone, c.id) // accepted again (replace of a removed ID: a compaction never reaches here)
			}
			e = &entry{}
			e.cur = Envelope{ID: c.id}
			bq.entries[c.id] = e
		}
		e.issued++
		if c.env.Rev >= e.issued {
			e.issued = c.env.Rev + 1
		}
		c.env.Rev = e.issued
		if e.inflight == nil {
			e.inflight = map[int64]bool{}
		}
		e.inflight[c.env.Rev] = true
		bq.mu.Unlock()
		pubs[bq] = append(pubs[bq], c.env)
		published = append(published, c)
	}
	var err error
	for bq, envs := range pubs {
		if err = bq.d.Publish(ctx, bq.q, envs); err != nil {
			err = fmt.Errorf("%w: publishing to %s: %w", store.ErrUnavailable, bq.q.Name, err)
			break
		}
	}
	if err == nil && len(rest) > 0 {
		err = s.Store.Apply(ctx, rest...)
	}
	if err != nil {
		s.rollback(published)
		return err
	}
	acks := map[*bqueue][]any{}
	for _, c := range order {
		bq := c.bq
		bq.mu.Lock()
		e := bq.entries[c.id]
		switch {
		case e == nil:
		case c.removed:
			if e.h != nil {
				acks[bq] = append(acks[bq], e.h)
			}
			for _, h := range e.pending {
				acks[bq] = append(acks[bq], h)
			}
			delete(bq.entries, c.id)
			bq.gone[c.id] = struct{}{}
		case c.publish:
			delete(e.inflight, c.env.Rev)
			if e.h != nil && c.existed {
				acks[bq] = append(acks[bq], e.h)
			}
			e.cur, e.h, e.since, e.lease = c.env, e.pending[c.env.Rev], time.Now(), c.lease
			for r, h := range e.pending {
				if r <= c.env.Rev && r != c.env.Rev {
					acks[bq] = append(acks[bq], h)
				}
				if r <= c.env.Rev {
					delete(e.pending, r)
				}
			}
		default:
			e.lease = c.lease
		}
		bq.mu.Unlock()
	}
	for bq, hs := range acks {
		if err := bq.d.Ack(ctx, bq.q, hs); err != nil {
			// The new states are durable; a copy whose ack was lost is
			// superseded or removed, and acknowledged when it comes back.
			s.log.Debug("broker: acknowledging replaced or removed copies failed; they are acknowledged when redelivered", "queue", bq.q.Name, "err", err)
		}
	}
	// A delivery's new copies (attempts+1) are on their way back: wait
	// for them before the handler gets the batch, so that its
	// settlements find them at once instead of waiting within the
	// handler's time limit. Past HandleWait the batch goes on; a
	// settlement then waits itself.
	s.awaitDelivered(ctx, order)
	return nil
}

func (s *Store) awaitDelivered(ctx context.Context, order []*change) {
	deadline := time.Now().Add(s.opt.HandleWait)
	for _, c := range order {
		if !c.publish || c.removed || c.lease == "" {
			continue
		}
		bq := c.bq
		for {
			bq.mu.Lock()
			e := bq.entries[c.id]
			if e == nil || e.h != nil || e.cur.Rev != c.env.Rev {
				bq.mu.Unlock()
				break
			}
			ch := bq.arrived
			bq.mu.Unlock()
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			t := time.NewTimer(left)
			select {
			case <-ch:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			t.Stop()
		}
	}
}

// awaitHandles waits until every copy a removal in order acknowledges has
// arrived from the broker.
func (s *Store) awaitHandles(ctx context.Context, order []*change) error {
	deadline := time.Now().Add(s.opt.HandleWait)
	for _, c := range order {
		if !c.removed || !c.existed || c.noWait {
			continue
		}
		bq := c.bq
		for {
			bq.mu.Lock()
			e := bq.entries[c.id]
			if e == nil || e.h != nil {
				bq.mu.Unlock()
				break
			}
			ch := bq.arrived
			bq.mu.Unlock()
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("%w: message %s of %s has not come back from the broker within %s (the connection is down or being re-established)", store.ErrUnavailable, c.id, bq.q.Name, s.opt.HandleWait)
			}
			t := time.NewTimer(left)
			select {
			case <-ch:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
			}
			t.Stop()
		}
	}
	return nil
}

// rollback forgets the copies of a write that failed: new messages are
// removed (a copy that was published anyway is acknowledged when it
// arrives), replaced ones keep their current copy.
func (s *Store) rollback(published []*change) {
	acks := map[*bqueue][]any{}
	for _, c := range published {
		bq := c.bq
		bq.mu.Lock()
		if e := bq.entries[c.id]; e != nil {
			delete(e.inflight, c.env.Rev)
			if h, ok := e.pending[c.env.Rev]; ok {
				acks[bq] = append(acks[bq], h)
				delete(e.pending, c.env.Rev)
			}
			if !c.existed && e.cur.Rev == 0 {
				delete(bq.entries, c.id)
				bq.gone[c.id] = struct{}{}
			}
		}
		bq.mu.Unlock()
	}
	for bq, hs := range acks {
		bq.ackQuietly(hs)
	}
}

// drop deletes a removed queue's broker queue.
func (s *Store) drop(bq *bqueue) {
	s.mu.Lock()
	delete(s.queues, bq.q.UID)
	s.mu.Unlock()
	if bq.stop != nil {
		bq.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bq.d.Delete(ctx, bq.q); err != nil {
		s.log.Warn("broker: deleting a removed queue on its broker failed; delete it there by hand", "queue", bq.q.Name, "err", err)
	}
}

// Messages lists a broker queue's messages once the copies waiting on the
// broker have arrived (at most DrainWait); later arrivals are adopted.
func (s *Store) Messages(ctx context.Context, queue string) ([]store.Message, error) {
	bq, err := s.queueFor(ctx, queue)
	if err != nil || bq == nil {
		if err != nil {
			return nil, err
		}
		return s.Store.Messages(ctx, queue)
	}
	deadline := time.Now().Add(s.opt.DrainWait)
	for {
		exists, ready, err := bq.d.Stat(ctx, bq.q)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		if !exists || ready == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	bq.mu.Lock()
	defer bq.mu.Unlock()
	bq.loaded = true
	out := make([]store.Message, 0, len(bq.entries))
	for _, e := range bq.entries {
		if e.cur.Rev > 0 {
			out = append(out, e.message(queue))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].AcceptedAt != out[j].AcceptedAt {
			return out[i].AcceptedAt < out[j].AcceptedAt
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Message is one broker message's state.
func (s *Store) Message(ctx context.Context, queue, id string) (store.Message, error) {
	bq, err := s.queueFor(ctx, queue)
	if err != nil {
		return store.Message{}, err
	}
	if bq == nil {
		return s.Store.Message(ctx, queue, id)
	}
	bq.mu.Lock()
	defer bq.mu.Unlock()
	if e := bq.entries[id]; e != nil && e.cur.Rev > 0 {
		return e.message(queue), nil
	}
	return store.Message{}, store.ErrNotFound
}

// MessageCount is the messages this host holds of a broker queue.
func (s *Store) MessageCount(ctx context.Context, queue string) (int, error) {
	bq, err := s.queueFor(ctx, queue)
	if err != nil {
		return 0, err
	}
	if bq == nil {
		return s.Store.MessageCount(ctx, queue)
	}
	bq.mu.Lock()
	defer bq.mu.Unlock()
	return len(bq.entries), nil
}

// Bodies reads broker messages' bodies from the copies this host holds.
func (s *Store) Bodies(ctx context.Context, queue string, ids []string) ([][]byte, error) {
	bq, err := s.queueFor(ctx, queue)
	if err != nil {
		return nil, err
	}
	if bq == nil {
		return s.Store.Bodies(ctx, queue, ids)
	}
	out := make([][]byte, len(ids))
	bq.mu.Lock()
	defer bq.mu.Unlock()
	for i, id := range ids {
		if e := bq.entries[id]; e != nil && len(e.cur.Body) > 0 {
			out[i] = append([]byte(nil), e.cur.Body...)
		}
	}
	return out, nil
}

// Observe reports a broker queue as its broker sees it: whether it
// exists, and the messages it holds (those this host holds, delivered to
// it, and those waiting on the broker). ok is false for a queue of the
// inner store.
func (s *Store) Observe(ctx context.Context, uid string) (exists bool, count int, ok bool, err error) {
	bq, err := s.queueFor(ctx, uid)
	if err != nil || bq == nil {
		return false, 0, false, err
	}
	exists, ready, err := bq.d.Stat(ctx, bq.q)
	if err != nil {
		return false, 0, true, err
	}
	bq.mu.Lock()
	held := len(bq.entries)
	if !exists {
		bq.deleted = true
	}
	bq.mu.Unlock()
	return exists, held + max(ready, 0), true, nil
}

// refreshLoop republishes copies held longer than RefreshAfter.
func (s *Store) refreshLoop() {
	defer close(s.rfDone)
	t := time.NewTicker(max(s.opt.RefreshAfter/10, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stopRf:
			return
		case <-t.C:
		}
		s.mu.Lock()
		qs := make([]*bqueue, 0, len(s.queues))
		for _, bq := range s.queues {
			qs = append(qs, bq)
		}
		s.mu.Unlock()
		for _, bq := range qs {
			var order []*change
			bq.mu.Lock()
			for id, e := range bq.entries {
				if e.h != nil && len(e.inflight) == 0 && e.cur.Rev > 0 && time.Since(e.since) > s.opt.RefreshAfter {
					order = append(order, &change{bq: bq, id: id, env: e.cur, lease: e.lease, existed: true, publish: true})
				}
			}
			bq.mu.Unlock()
			if len(order) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := s.commit(ctx, order, nil); err != nil {
				s.log.Warn("broker: republishing long-held messages failed; retried", "queue", bq.q.Name, "err", err)
			}
			cancel()
		}
	}
}

// Close stops consuming and closes the drivers and the inner store.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	qs := s.queues
	s.queues = map[string]*bqueue{}
	s.mu.Unlock()
	close(s.stopRf)
	<-s.rfDone
	for _, bq := range qs {
		if bq.stop != nil {
			bq.stop()
		}
	}
	var errs []error
	for _, d := range s.opt.Drivers {
		errs = append(errs, d.Close())
	}
	errs = append(errs, s.Store.Close())
	return errors.Join(errs...)
}

// newID is a message ID for a message another producer put on a queue:
// 32 random hex digits, like the engine's.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ResourcesView passes the inner store's copy-free listing through (the
// observer's full pass uses it), or lists with copies when it has none.
func (s *Store) ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	if v, ok := s.Store.(interface {
		ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error)
	}); ok {
		return v.ResourcesView(ctx, space, formURL)
	}
	return s.Store.Resources(ctx, space, formURL)
}

// Operations passes store.OperationLister through.
func (s *Store) Operations(ctx context.Context, q store.OperationQuery) ([]store.Operation, error) {
	if l, ok := s.Store.(store.OperationLister); ok {
		return l.Operations(ctx, q)
	}
	return nil, errors.New("broker: the inner store does not list Operations")
}

// ResourcePage passes store.ResourceLister through, or pages a listing.
func (s *Store) ResourcePage(ctx context.Context, q store.ResourceQuery) ([]store.Resource, error) {
	if l, ok := s.Store.(store.ResourceLister); ok {
		return l.ResourcePage(ctx, q)
	}
	list, err := s.Store.Resources(ctx, q.Space, q.FormURL)
	if err != nil {
		return nil, err
	}
	return store.PageOf(list, q), nil
}

// CountResources passes store.ResourceCounter through, or counts a listing.
func (s *Store) CountResources(ctx context.Context, space string) (int, error) {
	if c, ok := s.Store.(store.ResourceCounter); ok {
		return c.CountResources(ctx, space)
	}
	list, err := s.Store.Resources(ctx, space, "")
	return len(list), err
}

// Revision is the revision of the copy of a message this host holds (0
// when it holds none): how many times its state was published. For tests
// and for debugging.
func (s *Store) Revision(queue, id string) int64 {
	s.mu.Lock()
	bq := s.queues[queue]
	s.mu.Unlock()
	if bq == nil {
		return 0
	}
	bq.mu.Lock()
	defer bq.mu.Unlock()
	if e := bq.entries[id]; e != nil {
		return e.cur.Rev
	}
	return 0
}
