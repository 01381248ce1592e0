package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/clock"
	"github.com/takoform/queuehost/runtime/store"
)

// Engine errors beyond the Forms' codes (Code maps them to
// "backend_unavailable"; the API layer checks them first).
var (
	// ErrQueueExists: AddQueue of a UID the engine already has.
	ErrQueueExists = errors.New("the queue is already known to the engine")
	// ErrUnknownConsumer: UpdateConsumer of a consumer that is not attached.
	ErrUnknownConsumer = errors.New("the consumer is not attached")
	// ErrConsumerConflict: the queue already has a consumer (one that is
	// still detaching counts), or the consumer UID is already attached.
	ErrConsumerConflict = errors.New("the queue already has a consumer")
	// ErrInvalidConfig: a QueueConfig or ConsumerConfig outside the Forms'
	// ranges, or an update that changes an immutable field.
	ErrInvalidConfig = errors.New("invalid queue or consumer configuration")
	// ErrNotRunning: the engine has not been started or has shut down.
	ErrNotRunning = errors.New("the delivery engine is not running")
)

// Options configure an Engine. The zero value is usable.
type Options struct {
	// Clock drives every schedule of the engine (visibility, batch fill,
	// retention, backoff, handler time limit). Default clock.Real().
	Clock clock.Clock
	// HandlerTimeout is the time limit of one handler invocation. Default
	// 30s.
	HandlerTimeout time.Duration
	// Logger receives the engine's operational logs. Default: discarded.
	Logger *slog.Logger
	// NewID issues message and batch IDs (1..256 characters, never
	// reused). Default: 128 random bits as 32 hex digits.
	NewID func() string
	// ObserveBatch, when set, is called after each handler invocation
	// returns (metrics). It must not block.
	ObserveBatch func(BatchObservation)
	// OnEvent, when set, is told of messages dead-lettered, discarded or
	// expired, once durable. It is called with the queue's lock held: it
	// must not block or call the engine.
	OnEvent func(Event)
	// Remote, when set, makes the engine one of several sharing a store
	// (spec/cluster.md): sends and dead-letter moves into a queue the
	// engine does not hold go to the store and Remote is told. The engine
	// then also indexes its messages by ID, so that Adopt can add those
	// another engine accepted.
	Remote Remote
	// Tracer, when set, records spans of sends, deliveries and
	// settlements (trace.go, package telemetry). nil: none, at no cost.
	Tracer Tracer
	// HostID names this host in the attempt history (store.Attempt.Host).
	HostID string
}

// Engine is the delivery engine: it accepts messages, delivers them in
// batches to consumers' handlers, applies settlements, retries, dead-letters
// and expires them, all durably through a store.Store. Its methods are safe
// for concurrent use.
type Engine struct {
	store          store.Store
	res            abi.Resolver
	clock          clock.Clock
	handlerTimeout time.Duration
	log            *slog.Logger
	newID          func() string
	customID       bool // newID came from Options.NewID
	observeBatch   func(BatchObservation)
	onEvent        func(Event)
	remote         Remote
	tracer         Tracer
	hostID         string

	ctx    context.Context // background work; cancelled when Stop returns
	cancel context.CancelFunc

	admin    sync.Mutex // serialises Start and AddQueue
	started  atomic.Bool
	stopping atomic.Bool
	stopped  atomic.Bool

	mu        sync.Mutex // leaf lock: never held while taking another
	queues    map[string]*queue
	consumers map[string]*consumer

	bmu     sync.Mutex // leaf lock
	running map[string]*batch
	// ended and endedOrder remember why the last leases of pull
	// consumers ended (pull.go); guarded by bmu.
	ended      map[string]endedLease
	endedOrder []string

	track tracker
	seq   atomic.Uint64 // accept order of messages
	// sseq is the last accept sequence number of a serialized queue's
	// message (or of a message sent to a queue another engine holds):
	// clock-based, so that engines sharing a store number alike (serial.go).
	sseq atomic.Uint64

	delivered atomic.Int64 // batches handed to a handler
	finished  atomic.Int64 // batches finalized after their handler ran

	evMu sync.Mutex
	evCh chan struct{}

	// chMu guards changed: the queues whose message count or existence
	// changed since the last ChangedQueues, each listed once (a queue's
	// listed flag says it is there). Leaf lock, taken with a queue's mu
	// held.
	chMu    sync.Mutex
	changed []*queue
}

// New returns an engine over st that finds handlers with res. Call
// AddQueue and Attach for the existing resources, then Start.
func New(st store.Store, res abi.Resolver, opts Options) *Engine {
	e := &Engine{
		store:          st,
		res:            res,
		clock:          opts.Clock,
		handlerTimeout: opts.HandlerTimeout,
		log:            opts.Logger,
		newID:          opts.NewID,
		observeBatch:   opts.ObserveBatch,
		onEvent:        opts.OnEvent,
		remote:         opts.Remote,
		tracer:         opts.Tracer,
		hostID:         opts.HostID,
		queues:         map[string]*queue{},
		consumers:      map[string]*consumer{},
		running:        map[string]*batch{},
		evCh:           make(chan struct{}),
	}
	e.track.e = e
	if e.clock == nil {
		e.clock = clock.Real()
	}
	if e.handlerTimeout <= 0 {
		e.handlerTimeout = 30 * time.Second
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.customID = e.newID != nil
	if e.newID == nil {
		e.newID = randomID
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	return e
}

func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (e *Engine) nowMs() int64 { return e.clock.Now().UTC().UnixMilli() }

func (e *Engine) newBatchID() string { return e.newID() }

// newMessageIDs issues n message IDs, distinct and not present in q.
// Default IDs are 128 random bits each, made with one read of the random
// source and one string for the whole batch: a collision is not a
// practical concern (about 2^-64 after 2^32 IDs), so only an injected
// NewID is checked.
func (e *Engine) newMessageIDs(q *queue, n int) []string {
	ids := make([]string, n)
	if !e.customID {
		raw := make([]byte, 16*n)
		rand.Read(raw)
		all := hex.EncodeToString(raw)
		for i := range ids {
			ids[i] = all[32*i : 32*i+32]
		}
		return ids
	}
	seen := make(map[string]bool, n)
	for i := range ids {
		for {
			id := e.newID()
			q.mu.Lock()
			_, dup := q.ids[id]
			q.mu.Unlock()
			if !dup && !seen[id] && id != "" && len(id) <= abi.MaxIDLength {
				ids[i], seen[id] = id, true
				break
			}
		}
	}
	return ids
}

// ChangedQueues returns the queues whose message count or existence
// changed since the last call, each once, and starts collecting anew. A
// change made after it returns is in the next call's list, so a caller that
// reads QueueStats after it sees every change either in that read or in
// the next list: the controller's observer re-observes only these queues
// instead of asking about every queue each period.
func (e *Engine) ChangedQueues() []string {
	e.chMu.Lock()
	qs := e.changed
	e.changed = nil
	e.chMu.Unlock()
	if len(qs) == 0 {
		return nil
	}
	uids := make([]string, len(qs))
	for i, q := range qs {
		q.mu.Lock()
		q.listed = false
		q.mu.Unlock()
		uids[i] = q.uid
	}
	return uids
}

// noteChanged lists q in ChangedQueues once until it is read. mu held.
func (q *queue) noteChanged() {
	if q.listed {
		return
	}
	q.listed = true
	q.e.chMu.Lock()
	q.e.changed = append(q.e.changed, q)
	q.e.chMu.Unlock()
}

func (e *Engine) queue(uid string) *queue {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queues[uid]
}

func (e *Engine) registerBatch(b *batch) {
	e.bmu.Lock()
	e.running[b.id] = b
	e.bmu.Unlock()
}

func (e *Engine) unregisterBatch(id string) {
	e.bmu.Lock()
	delete(e.running, id)
	e.bmu.Unlock()
}

func (e *Engine) lookupBatch(id string) *batch {
	e.bmu.Lock()
	defer e.bmu.Unlock()
	return e.running[id]
}

func validQueue(c QueueConfig) error {
	switch {
	case c.UID == "":
		return fmt.Errorf("%w: empty queue UID", ErrInvalidConfig)
	case c.DeliveryDelaySeconds < 0 || c.DeliveryDelaySeconds > abi.MaxDelaySeconds:
		return fmt.Errorf("%w: deliveryDelaySeconds %d", ErrInvalidConfig, c.DeliveryDelaySeconds)
	case c.MessageRetentionSeconds < 60 || c.MessageRetentionSeconds > 1209600:
		return fmt.Errorf("%w: messageRetentionSeconds %d", ErrInvalidConfig, c.MessageRetentionSeconds)
	}
	return nil
}

func validConsumer(c ConsumerConfig) error {
	switch {
	case c.UID == "" || c.QueueUID == "" || (c.WorkerUID == "") != c.Pull:
		return fmt.Errorf("%w: consumer and queue UIDs are required, and a worker UID exactly when it is not a pull consumer", ErrInvalidConfig)
	case c.MaxBatchSize < 1 || c.MaxBatchSize > 100:
		return fmt.Errorf("%w: maxBatchSize %d", ErrInvalidConfig, c.MaxBatchSize)
	case c.MaxBatchTimeoutSeconds < 0 || c.MaxBatchTimeoutSeconds > 60:
		return fmt.Errorf("%w: maxBatchTimeoutSeconds %d", ErrInvalidConfig, c.MaxBatchTimeoutSeconds)
	case c.MaxConcurrency < 1 || c.MaxConcurrency > 250:
		return fmt.Errorf("%w: maxConcurrency %d", ErrInvalidConfig, c.MaxConcurrency)
	case c.MaxRetries < 0 || c.MaxRetries > 100:
		return fmt.Errorf("%w: maxRetries %d", ErrInvalidConfig, c.MaxRetries)
	case c.RetryDelaySeconds < 0 || c.RetryDelaySeconds > abi.MaxDelaySeconds:
		return fmt.Errorf("%w: retryDelaySeconds %d", ErrInvalidConfig, c.RetryDelaySeconds)
	case c.DeadLetterQueueUID == c.QueueUID:
		return fmt.Errorf("%w: a queue cannot be its own dead-letter queue", ErrInvalidConfig)
	}
	return nil
}

func backendErr(err error) error {
	if err == nil || errors.Is(err, abi.ErrBackendUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
}

// Start loads every added queue's messages from the store and begins
// delivery. Messages leased by a batch of an earlier run are unsettled: they
// are deliverable at once (or dead-lettered/discarded if they already had
// 1+maxRetries deliveries). Queues added after Start are loaded by AddQueue.
func (e *Engine) Start(ctx context.Context) error {
	e.admin.Lock()
	defer e.admin.Unlock()
	if e.started.Load() || e.stopping.Load() {
		return fmt.Errorf("delivery: Start called twice or after Stop")
	}
	e.mu.Lock()
	qs := make([]*queue, 0, len(e.queues))
	for _, q := range e.queues {
		qs = append(qs, q)
	}
	e.mu.Unlock()
	loaded := make([][]*msg, len(qs))
	recovered := make([]map[string][]*msg, len(qs))
	for i, q := range qs {
		ms, rec, err := e.load(ctx, q.uid, q.serial)
		if err != nil {
			return err
		}
		loaded[i], recovered[i] = ms, rec
	}
	now := e.nowMs()
	for i, q := range qs {
		q.mu.Lock()
		for _, m := range loaded[i] {
			q.insert(m, now)
		}
		q.recover(recovered[i], now)
		q.mu.Unlock()
	}
	e.started.Store(true)
	for _, q := range qs {
		q.mu.Lock()
		q.pump()
		q.mu.Unlock()
	}
	return nil
}

func (e *Engine) load(ctx context.Context, uid string, serial bool) ([]*msg, map[string][]*msg, error) {
	sms, err := e.store.Messages(ctx, uid)
	if err != nil {
		return nil, nil, backendErr(fmt.Errorf("loading the messages of queue %s: %w", uid, err))
	}
	now := e.nowMs()
	// A serialized queue's IDs carry its accept order (serial.go).
	var seqs map[string]uint64
	if serial {
		seqs = make(map[string]uint64, len(sms))
		for _, sm := range sms {
			s, ok := serialSeq(sm.ID)
			if !ok {
				e.log.Warn("delivery: a message of a serialized queue has no accept sequence in its ID; ordering the queue by accept time", "queue", uid, "id", sm.ID)
				seqs = nil
				break
			}
			seqs[sm.ID] = s
		}
	}
	if seqs != nil {
		sort.Slice(sms, func(i, j int) bool { return seqs[sms[i].ID] < seqs[sms[j].ID] })
		if len(sms) > 0 {
			e.raiseSerial(seqs[sms[len(sms)-1].ID])
		}
	} else {
		// The store keeps no accept order within a millisecond; ID order
		// is the stable stand-in after a restart.
		sort.Slice(sms, func(i, j int) bool {
			if sms[i].AcceptedAt != sms[j].AcceptedAt {
				return sms[i].AcceptedAt < sms[j].AcceptedAt
			}
			return sms[i].ID < sms[j].ID
		})
	}
	out := make([]*msg, 0, len(sms))
	leased := 0
	var recovered map[string][]*msg
	for _, sm := range sms {
		seq, ok := seqs[sm.ID]
		if !ok {
			seq = e.seq.Add(1)
		}
		m := newMsg(sm.ID, sm.AcceptedAt, sm.VisibleAt, sm.Attempts, sm.Size, seq)
		m.dl = sm.DeadLetter
		m.tracedFrom(sm.TraceParent)
		if strings.HasPrefix(sm.Lease, PullLeasePrefix) && sm.VisibleAt > now {
			// An unexpired pull lease: kept until its expiry (pull.go).
			if recovered == nil {
				recovered = map[string][]*msg{}
			}
			recovered[sm.Lease] = append(recovered[sm.Lease], m)
		} else if sm.Lease != "" {
			// Unsettled in a batch of a run that ended: deliverable now.
			leased++
			if m.visibleAt > now {
				m.visibleAt = now
			}
		}
		out = append(out, m)
	}
	if leased > 0 {
		e.log.Info("delivery: redelivering messages left unsettled by an earlier run", "queue", uid, "count", leased)
		if e.onEvent != nil {
			e.onEvent(Event{Kind: EventRedelivered, QueueUID: uid, Count: leased})
		}
	}
	return out, recovered, nil
}

// Stop stops taking new batches, lets running handlers finish until ctx
// ends (the grace period: a handler that returns in time is settled as
// usual), then closes the batches still running without acknowledging
// anything: what is unsettled stays in the store and is redelivered after
// a restart. It returns nil when every batch ended within the grace period,
// else an error wrapping ctx's. Afterwards every method fails with
// ErrNotRunning (Settle: ErrUnknownBatch).
func (e *Engine) Stop(ctx context.Context) error {
	if e.stopping.Swap(true) {
		return nil
	}
	e.notify()
	e.mu.Lock()
	qs := make([]*queue, 0, len(e.queues))
	for _, q := range e.queues {
		qs = append(qs, q)
	}
	e.mu.Unlock()
	var waits []chan struct{}
	for _, q := range qs {
		q.mu.Lock()
		q.stopTimer()
		var fin []*batch
		for _, b := range q.batches {
			if b.state == bDispatching {
				b.abort = true
			}
			if b.pull && e.closeLocked(b, outClose) {
				// A running pull lease stays as the store has it (with its
				// expiry): a restart keeps it. Nothing to wait for.
				fin = append(fin, b)
			}
			waits = append(waits, b.done)
		}
		q.mu.Unlock()
		for _, b := range fin {
			e.finalize(b)
		}
	}
	var forced error
	if err := waitAll(ctx, waits); err == nil {
		err = e.track.wait(ctx)
		forced = err
	} else {
		forced = err
	}
	if forced != nil {
		n := 0
		for _, q := range qs {
			var fin []*batch
			q.mu.Lock()
			for _, b := range q.batches {
				if e.closeLocked(b, outClose) {
					fin = append(fin, b)
				}
				n++
			}
			q.mu.Unlock()
			for _, b := range fin {
				e.finalize(b)
			}
		}
		e.log.Warn("delivery: shutdown grace period ended; closed unfinished batches without acknowledging", "batches", n)
		forced = fmt.Errorf("delivery: shutdown grace period ended with %d batches unfinished (closed, nothing acknowledged): %w", n, forced)
	}
	e.stopped.Store(true)
	e.cancel()
	return forced
}

func waitAll(ctx context.Context, chans []chan struct{}) error {
	for _, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (e *Engine) checkRunning() error {
	if e.stopping.Load() {
		return ErrNotRunning
	}
	return nil
}

// AddQueue makes a queue known to the engine. After Start it also loads
// the queue's stored messages.
func (e *Engine) AddQueue(ctx context.Context, cfg QueueConfig) error {
	if err := validQueue(cfg); err != nil {
		return err
	}
	if err := e.checkRunning(); err != nil {
		return err
	}
	e.admin.Lock()
	defer e.admin.Unlock()
	if e.queue(cfg.UID) != nil {
		return ErrQueueExists
	}
	q := &queue{e: e, uid: cfg.UID, cfg: cfg, batches: map[string]*batch{}, expiry: msgOrder{byExpiry: true},
		serial: cfg.Serialized, avail: msgOrder{bySeq: cfg.Serialized}} // mutate:serial-retry-to-back
	q.sendDelay.Store(int32(cfg.DeliveryDelaySeconds))
	if e.customID || e.remote != nil || cfg.External {
		q.ids = map[string]*msg{}
	}
	if e.started.Load() {
		ms, rec, err := e.load(ctx, cfg.UID, cfg.Serialized)
		if err != nil {
			return err
		}
		now := e.nowMs()
		q.mu.Lock() // ChangedQueues may already see q (insert lists it)
		for _, m := range ms {
			q.insert(m, now)
		}
		q.recover(rec, now)
		q.mu.Unlock()
	}
	e.mu.Lock()
	e.queues[cfg.UID] = q
	e.mu.Unlock()
	q.mu.Lock()
	q.noteChanged()
	q.pump()
	q.mu.Unlock()
	return nil
}

// UpdateQueue replaces a queue's settings. A new deliveryDelaySeconds
// applies to later sends only; a new messageRetentionSeconds applies at once
// to every message the queue holds (expired ones are removed).
func (e *Engine) UpdateQueue(ctx context.Context, cfg QueueConfig) error {
	if err := validQueue(cfg); err != nil {
		return err
	}
	q := e.queue(cfg.UID)
	if q == nil {
		return abi.ErrUnknownQueue
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removed {
		return abi.ErrUnknownQueue
	}
	if cfg.Serialized != q.serial {
		return fmt.Errorf("%w: whether a queue is serialized is fixed when it is added", ErrInvalidConfig)
	}
	q.cfg = cfg // mutate:delay-update-retimes
	q.sendDelay.Store(int32(cfg.DeliveryDelaySeconds))
	q.pump()
	return nil
}

// RemoveQueue durably deletes every message of the queue (store.DropQueue)
// and forgets it. Batches of the queue are closed (settlements answer
// ErrUnknownBatch); a consumer still attached is dropped with it. Removing
// an unknown queue is a no-op.
func (e *Engine) RemoveQueue(ctx context.Context, uid string) error {
	return e.removeQueue(ctx, uid, true)
}

// removeQueue is RemoveQueue; with drop false the stored messages stay
// (Unload).
func (e *Engine) removeQueue(ctx context.Context, uid string, drop bool) error {
	q := e.queue(uid)
	if q == nil {
		return nil
	}
	q.life.Lock()
	defer q.life.Unlock()
	if drop {
		if err := e.store.Apply(ctx, store.DropQueue{Queue: uid}); err != nil {
			return backendErr(err)
		}
	}
	q.mu.Lock()
	q.removed = true
	q.unloaded = !drop
	q.noteChanged()
	q.stopTimer()
	var fin []*batch
	for _, b := range q.batches {
		if b.state == bDispatching {
			b.abort = true
		}
		if e.closeLocked(b, outClose) {
			fin = append(fin, b)
		}
	}
	c := q.consumer
	q.consumer = nil
	q.mu.Unlock()
	for _, b := range fin {
		e.finalize(b)
	}
	e.mu.Lock()
	if e.queues[uid] == q {
		delete(e.queues, uid)
	}
	if c != nil && e.consumers[c.cfg.UID] == c {
		delete(e.consumers, c.cfg.UID)
	}
	e.mu.Unlock()
	e.notify()
	return nil
}

// QueueStats returns the number of messages the queue holds: accepted and
// not yet acknowledged, discarded, dead-lettered away or removed as expired.
func (e *Engine) QueueStats(ctx context.Context, uid string) (messageCount int, err error) {
	q := e.queue(uid)
	if q == nil {
		return 0, abi.ErrUnknownQueue
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removed {
		return 0, abi.ErrUnknownQueue
	}
	return q.held, nil
}

// Attach connects a consumer to its queue; delivery starts at once (after
// Start). The queue must be known and have no consumer.
func (e *Engine) Attach(ctx context.Context, cfg ConsumerConfig) error {
	if err := validConsumer(cfg); err != nil {
		return err
	}
	if err := e.checkRunning(); err != nil {
		return err
	}
	q := e.queue(cfg.QueueUID)
	if q == nil {
		return abi.ErrUnknownQueue
	}
	c := &consumer{cfg: cfg, q: q}
	e.mu.Lock()
	if _, dup := e.consumers[cfg.UID]; dup {
		e.mu.Unlock()
		return ErrConsumerConflict
	}
	e.consumers[cfg.UID] = c
	e.mu.Unlock()
	q.mu.Lock()
	if cfg.Pull && q.serial {
		q.mu.Unlock()
		e.mu.Lock()
		delete(e.consumers, cfg.UID)
		e.mu.Unlock()
		return fmt.Errorf("%w: a serialized queue cannot have a pull consumer", ErrInvalidConfig)
	}
	if q.removed || q.consumer != nil {
		removed := q.removed
		q.mu.Unlock()
		e.mu.Lock()
		delete(e.consumers, cfg.UID)
		e.mu.Unlock()
		if removed {
			return abi.ErrUnknownQueue
		}
		return ErrConsumerConflict
	}
	q.consumer = c
	if !cfg.Pull {
		q.releaseRecovered(e.nowMs())
	}
	q.pump()
	q.mu.Unlock()
	return nil
}

// ConsumerAttached reports whether the engine holds the consumer (Attach
// returned and no Detach finished since).
func (e *Engine) ConsumerAttached(_ context.Context, uid string) (bool, error) {
	return e.consumer(uid) != nil, nil
}

func (e *Engine) consumer(uid string) *consumer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.consumers[uid]
}

// UpdateConsumer replaces a consumer's settings. They apply to the next
// batches and to the next settlement decisions (retry delay, maxRetries,
// dead-letter queue); running batches are not restarted. QueueUID and
// WorkerUID cannot change.
func (e *Engine) UpdateConsumer(ctx context.Context, cfg ConsumerConfig) error {
	if err := validConsumer(cfg); err != nil {
		return err
	}
	c := e.consumer(cfg.UID)
	if c == nil {
		return ErrUnknownConsumer
	}
	q := c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if cfg.QueueUID != c.cfg.QueueUID || cfg.WorkerUID != c.cfg.WorkerUID {
		return fmt.Errorf("%w: queue and worker of a consumer are immutable", ErrInvalidConfig)
	}
	if c.detaching {
		return ErrUnknownConsumer
	}
	c.cfg = cfg
	q.pump()
	return nil
}

// Detach disconnects a consumer. It stops new batches at once, then waits
// until every batch of the consumer has ended; a handler that returns
// normally meanwhile does NOT acknowledge what it left unsettled (only its
// explicit settlements count), and nothing unsettled is acknowledged:
// those messages are deliverable again. When ctx ends first, the running
// batches are closed (settlements answer ErrUnknownBatch, the handler's
// context is cancelled). Detach returns nil only once that stop boundary is
// proven (no handler of the consumer can settle anything any more); else an
// error wrapping ctx's, and the consumer stays detaching: call Detach again.
// Detaching an unknown consumer is a no-op.
func (e *Engine) Detach(ctx context.Context, consumerUID string) error {
	c := e.consumer(consumerUID)
	if c == nil {
		return nil
	}
	q := c.q
	q.mu.Lock()
	c.detaching = true
	var waits []chan struct{}
	for _, b := range q.batches {
		if b.c != c {
			continue
		}
		b.noAck = true
		if b.state == bDispatching {
			b.abort = true
		}
		if b.pull && e.closeLocked(b, outRelease) {
			// No handler to wait for: the lease's unsettled messages are
			// visible again at once.
			e.track.add()
			go func() {
				defer e.track.done()
				e.finalize(b)
			}()
		}
		waits = append(waits, b.done)
	}
	q.pump()
	q.mu.Unlock()
	e.notify()

	if err := waitAll(ctx, waits); err != nil {
		var fin []*batch
		q.mu.Lock()
		for _, b := range q.batches {
			if b.c == c && e.closeLocked(b, outClose) {
				fin = append(fin, b)
			}
		}
		q.mu.Unlock()
		for _, b := range fin {
			e.finalize(b)
		}
		q.mu.Lock()
		proven := true
		for _, b := range q.batches {
			if b.c == c && !(b.state == bDispatching && b.abort) {
				proven = false
			}
		}
		q.mu.Unlock()
		if !proven {
			return fmt.Errorf("delivery: detach of consumer %s: settlements still in flight: %w", consumerUID, err)
		}
	}
	q.mu.Lock()
	if q.consumer == c {
		q.consumer = nil
	}
	q.pump()
	q.mu.Unlock()
	e.mu.Lock()
	if e.consumers[consumerUID] == c {
		delete(e.consumers, consumerUID)
	}
	e.mu.Unlock()
	e.notify()
	return nil
}

// Send accepts 1..100 messages into a queue atomically and durably and
// returns their new IDs in input order. Validation (ErrBatchTooLarge,
// ErrInvalidBody, ErrMessageTooLarge, ErrInvalidDelay) happens before any
// effect; a store failure (ErrBackendUnavailable) accepts none.
func (e *Engine) Send(ctx context.Context, queueUID string, msgs []abi.OutgoingMessage) ([]string, error) {
	return e.SendWith(ctx, queueUID, msgs, nil)
}

// SendWith is Send with extra mutations written in the same store write as
// the messages, given their IDs (the publish extension's Idempotency-Key
// record, spec/peers.md §Publish): both are durable or neither is. extra
// nil is Send.
func (e *Engine) SendWith(ctx context.Context, queueUID string, msgs []abi.OutgoingMessage, extra func(ids []string) []store.Mutation) ([]string, error) {
	if e.tracer == nil {
		return e.send(ctx, queueUID, msgs, extra, "")
	}
	tq := TracedQueue{UID: queueUID, Name: queueUID}
	if q := e.queue(queueUID); q != nil {
		q.mu.Lock()
		tq = q.traceQueue()
		q.mu.Unlock()
	}
	tp, end := e.tracer.Send(ctx, tq, len(msgs))
	ids, err := e.send(ctx, queueUID, msgs, extra, tp)
	end(ids, err)
	return ids, err
}

// send is SendWith, storing traceParent with each message.
func (e *Engine) send(ctx context.Context, queueUID string, msgs []abi.OutgoingMessage, extra func(ids []string) []store.Mutation, traceParent string) ([]string, error) {
	if len(msgs) < 1 || len(msgs) > abi.MaxSendBatch { // mutate:send-batch-101-2
		return nil, abi.ErrBatchTooLarge
	}
	for _, m := range msgs {
		switch {
		case len(m.Body) == 0:
			return nil, abi.ErrInvalidBody
		case len(m.Body) > abi.MaxBodyBytes: // mutate:message-too-large-2
			return nil, abi.ErrMessageTooLarge
		case m.Delay != nil && (*m.Delay < 0 || *m.Delay > abi.MaxDelaySeconds):
			return nil, abi.ErrInvalidDelay
		}
	}
	if !e.started.Load() || e.stopped.Load() {
		return nil, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, ErrNotRunning)
	}
	q := e.queue(queueUID)
	if q == nil {
		return e.sendRemote(ctx, queueUID, msgs, extra, traceParent)
	}
	q.life.RLock()
	if q.removed {
		unloaded := q.unloaded
		q.life.RUnlock()
		if unloaded && e.remote != nil {
			// Its delivery moved to another engine (Unload) after the
			// lookup: the queue exists, and is sent to as one held
			// elsewhere.
			return e.sendRemote(ctx, queueUID, msgs, extra, traceParent)
		}
		return nil, abi.ErrUnknownQueue
	}
	defer q.life.RUnlock()
	defDelay := int(q.sendDelay.Load())
	var ids []string
	var seq uint64
	if q.serial {
		// Accept order is taken under the queue's lock, and nothing
		// accepted after this send is delivered before it (serial.go).
		q.mu.Lock()
		first := q.reserveSeqs(len(msgs))
		q.mu.Unlock()
		defer func() {
			q.mu.Lock()
			q.endPending(first)
			q.pump()
			q.mu.Unlock()
		}()
		ids = e.serialIDs(q, first, len(msgs))
		seq = first - 1
	} else {
		ids = e.newMessageIDs(q, len(msgs))
		seq = e.seq.Add(uint64(len(msgs))) - uint64(len(msgs))
	}
	now := e.nowMs()
	muts := make([]store.Mutation, len(msgs))
	news := make([]*msg, len(msgs))
	var tr *msgTrace // shared: a msgTrace is never changed
	if traceParent != "" {
		tr = &msgTrace{send: traceParent}
	}
	for i, m := range msgs {
		delay := defDelay
		if m.Delay != nil { // mutate:send-delay-loses
			delay = *m.Delay
		}
		visibleAt := now + int64(delay)*1000
		// The body is not copied: the store encodes (Journaled) or copies
		// (Memory) it within Apply and keeps no reference.
		muts[i] = store.AcceptMessage{
			Message: store.Message{Queue: queueUID, ID: ids[i], AcceptedAt: now, VisibleAt: visibleAt, Size: len(m.Body), TraceParent: traceParent},
			Body:    m.Body,
		}
		news[i] = newMsg(ids[i], now, visibleAt, 0, len(m.Body), seq+uint64(i)+1)
		news[i].tr = tr
	}
	if q.ids != nil {
		q.mu.Lock()
		q.reserve(ids)
		q.mu.Unlock()
	}
	if extra != nil {
		muts = append(muts, extra(ids)...)
	}
	if err := e.store.Apply(ctx, muts...); err != nil {
		q.mu.Lock()
		q.unreserve(ids)
		q.mu.Unlock()
		return nil, backendErr(err)
	}
	q.count.accepted.Add(uint64(len(msgs)))
	q.mu.Lock()
	if !q.removed {
		q.insertSent(news, e.nowMs())
		q.pump()
	}
	q.mu.Unlock()
	if _, current := e.currentLease(queueUID); !current {
		// The queue's lease may have moved to another engine before
		// this commit (a send is not fenced), and its new owner may have
		// loaded the queue without it: it is told, as for a send into a
		// queue held elsewhere (adopting what it holds already is a
		// no-op). While the lease is current by this engine's clock no
		// other engine can have taken the queue yet, so a later owner
		// loads the message.
		e.remote.Accepted(queueUID, ids)
	}
	return ids, nil
}

// notify wakes whoever waits for engine progress (tests).
func (e *Engine) notify() {
	e.evMu.Lock()
	close(e.evCh)
	e.evCh = make(chan struct{})
	e.evMu.Unlock()
}

func (e *Engine) events() <-chan struct{} {
	e.evMu.Lock()
	defer e.evMu.Unlock()
	return e.evCh
}

// tracker counts the engine's background work (dispatching, finalizing,
// background writes), not the time handlers run.
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{}
	e    *Engine
}

func (t *tracker) add() {
	t.mu.Lock()
	if t.n == 0 {
		t.zero = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.zero)
	}
	e := t.e
	t.mu.Unlock()
	if e != nil {
		e.notify()
	}
}

func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	ch := t.zero
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
