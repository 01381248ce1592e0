package host

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/schemas"
)

// Several active hosts on one PostgreSQL database (spec/cluster.md, phase
// 2). Every host serves the whole Host API; the delivery of each queue is
// owned by one live host at a time through the lease "queue/<uid>", whose
// epoch fences every delivery write of the owner (pgstore.ApplyFenced, the
// check inside the write's transaction). Queues are placed on the live
// members by rendezvous hashing; a host acquires the leases of the queues
// that hash to it and releases those that hash elsewhere, so ownership
// moves when a host joins or dies (a dead host's leases expire after the
// ttl). A send on any host is durable on commit and NOTIFYs the owner,
// which adopts the message at once; resource changes NOTIFY every host,
// which re-reads the resource and updates its engine.

// Notification channels of the cluster.
const (
	// sendChannel: "<queue uid> <id>,<id>,...": messages accepted into a
	// queue by a host that does not own it; "" on the queue part asks
	// for a full re-read.
	sendChannel = "takohost_send"
	// resourceChannel: "<origin host id> <resource uid>": a resource
	// record was written.
	resourceChannel = "takohost_resources"
	// detachChannel: "<consumer uid> <queue uid>": a host deleting a
	// consumer asks the queue's owner to detach it; detachedChannel:
	// "<consumer uid>": the owner's answer once no handler of it runs.
	detachChannel   = "takohost_detach"
	detachedChannel = "takohost_detached"
	// queueOpChannel: "<queue uid>": a host asks the queue's owner to
	// carry out the queue's unfinished purges and redrives.
	queueOpChannel = "takohost_queueop"
	// cancelChannel: "<queue uid> <operation id> <principal name>": a
	// host asks the owner of a redrive's queue to cancel it;
	// cancelledChannel: "<operation id>": the owner's answer once the
	// cancel (or the redrive's end) is recorded.
	cancelChannel    = "takohost_cancel"
	cancelledChannel = "takohost_cancelled"
)

func queueLease(uid string) string { return "queue/" + uid }

// cluster is the host's part of a cluster of active hosts: the queues'
// ownership, the engine as the controller sees it (every queue, held or
// not), the notifications.
type cluster struct {
	pg   *pgstore.Store
	id   string
	addr string
	// bound is the address the Host API listens on once it does (Addr of
	// the membership: where other hosts forward pull requests).
	bound atomic.Pointer[string]
	ttl   time.Duration
	log   *slog.Logger
	eng   *delivery.Engine
	// reindex, when set, is told of resource records changed by another
	// host (the controller's reference index).
	reindex func(ctx context.Context, uid string)
	// resume, when set, drives the unfinished Operations no live host
	// drives (controller ResumeUnfinished), every rescan.
	resume func(ctx context.Context)
	// resumeQueue, when set, drives the unfinished purges and redrives
	// of the queues for which owned is true (controller ResumeQueueOps).
	resumeQueue func(ctx context.Context, owned func(queueUID string) bool)
	// cancel, when set, records the cancel of a redrive this host carries
	// out (controller CancelQueueOp).
	cancelOp func(ctx context.Context, id, by string) error
	// cancelWait holds, by Operation ID, the channels of CancelElsewhere
	// calls waiting for the owner's answer.
	cancelWait map[string][]chan struct{}
	// locker holds the spaces' admission locks (controller
	// Options.SharedLock).
	locker *pgstore.Locker
	// plain is the store as the controller writes it (unfenced, with the
	// host's fault injection).
	plain store.Store
	// detachWait holds, by consumer UID, the channels of Detach calls
	// waiting for the owner's answer.
	dmu        sync.Mutex
	detachWait map[string][]chan struct{}

	// own serialises ownership changes and the engine calls that depend
	// on ownership; mu (a leaf) guards the maps.
	own       sync.Mutex
	mu        sync.Mutex
	queues    map[string]delivery.QueueConfig
	consumers map[string]delivery.ConsumerConfig
	byQueue   map[string]string // queue UID -> consumer UID
	owned     map[string]store.Lease
	// validUntil is, by this host's monotonic clock, until when each
	// owned lease is surely still held: the start of the call that took
	// or renewed it, plus the ttl, minus a tenth for clock rate drift.
	validUntil map[string]time.Time
	// leaving: owned queues being handed over (handOverQueue).
	leaving   map[string]bool
	members   []string
	renewedAt time.Time

	kick     chan struct{}
	pmu      sync.Mutex
	sends    map[string][]string // queue -> IDs to announce
	sendKick chan struct{}
	adopts   map[string][]string // queue -> IDs to adopt; nil slice: re-read all
	adoptKck chan struct{}
	changes  []string // resource UIDs changed by other hosts
	// announces are this host's resource changes waiting to be
	// announced (announceLoop).
	announces []string
	annKick   chan struct{}
	chKick    chan struct{}

	stops  []func()
	bg     context.Context // background work; ends with Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newCluster(pg *pgstore.Store, id, addr string, ttl time.Duration, log *slog.Logger) *cluster {
	return &cluster{
		pg: pg, id: id, addr: addr, ttl: ttl, log: log,
		queues: map[string]delivery.QueueConfig{}, consumers: map[string]delivery.ConsumerConfig{},
		byQueue: map[string]string{}, owned: map[string]store.Lease{}, validUntil: map[string]time.Time{}, leaving: map[string]bool{},
		kick: make(chan struct{}, 1), sends: map[string][]string{}, sendKick: make(chan struct{}, 1),
		adopts: map[string][]string{}, adoptKck: make(chan struct{}, 1), chKick: make(chan struct{}, 1), annKick: make(chan struct{}, 1),
		detachWait: map[string][]chan struct{}{}, cancelWait: map[string][]chan struct{}{},
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// tick is how often placement, heartbeat and renewal run.
func (c *cluster) tick() time.Duration { return max(c.ttl/5, 50*time.Millisecond) }

// rescanEvery is how often every owned queue is re-read from the store, in
// case a notification was lost (a host died between its commit and its
// NOTIFY).
func (c *cluster) rescanEvery() time.Duration { return max(3*c.ttl, 5*time.Second) }

// Start listens, joins and takes this host's share of the queues before
// the host reports ready.
func (c *cluster) Start(ctx context.Context) error {
	bg, cancel := context.WithCancel(context.Background())
	c.bg, c.cancel = bg, cancel
	// One connection carries every channel (a database's connections are
	// few).
	stop, err := c.pg.ListenMany(bg, map[string]func(string){
		sendChannel: c.onSend, resourceChannel: c.onResource,
		pgstore.ReleasedChannel: func(name string) {
			if name == "" || strings.HasPrefix(name, "queue/") {
				poke(c.kick)
			}
		},
		detachChannel: c.onDetach, detachedChannel: c.onDetached, queueOpChannel: c.onQueueOp,
		cancelChannel: c.onCancel, cancelledChannel: c.onCancelled,
	})
	if err != nil {
		cancel()
		return fmt.Errorf("cluster: listening for the other hosts: %w", err)
	}
	c.stops = append(c.stops, stop)
	c.place(ctx)
	c.log.Info("cluster: active host on the shared database", "host", c.id, "members", len(c.members), "queuesOwned", len(c.owned), "leaseTTL", c.ttl.String())
	c.wg.Go(func() { c.loop(bg) })
	c.wg.Go(func() { c.sendLoop(bg) })
	c.wg.Go(func() { c.adoptLoop(bg) })
	c.wg.Go(func() { c.changeLoop(bg) })
	c.wg.Go(func() { c.announceLoop(bg) })
	c.wg.Go(func() { c.expiryLoop(bg) })
	return nil
}

// expiryLoop closes the running batches of every owned queue whose lease
// has run out by this host's clock before its renewal came back (a
// renewal blocked or failing): a handler learns that its queue's lease
// may be gone at once, not at the next renewal or settlement (which
// would be fenced). The queue stays loaded: a renewal that succeeds
// after all makes it deliverable again, one that fails unloads it.
func (c *cluster) expiryLoop(ctx context.Context) {
	t := time.NewTicker(max(c.tick()/4, 10*time.Millisecond))
	defer t.Stop()
	closed := map[string]time.Time{} // queue -> the validity already acted on
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var expired []string
		c.mu.Lock()
		for uid := range c.owned {
			if v := c.validUntil[uid]; now.After(v) && !closed[uid].Equal(v) {
				closed[uid] = v
				expired = append(expired, uid)
			}
		}
		for uid := range closed {
			if _, ok := c.owned[uid]; !ok {
				delete(closed, uid)
			}
		}
		c.mu.Unlock()
		for _, uid := range expired {
			if n := c.eng.CloseBatches(uid); n > 0 {
				c.log.Warn("cluster: a queue's lease ran out by this host's clock before its renewal; closed its running batches", "queue", uid, "batches", n)
			}
		}
	}
}

func (c *cluster) stopListeners() {
	for _, s := range c.stops {
		s()
	}
	c.stops = nil
}

// Stop stops placement and the notifications. The leases stay held until
// the engine has stopped (its running batches may still settle), then
// clusterLeases releases them.
func (c *cluster) Stop(ctx context.Context) error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.stopListeners()
	return nil
}

// clusterLeases is the part that, stopped after the engine, releases
// every owned queue's lease (another host takes it over at once) and
// leaves the membership.
type clusterLeases struct{ c *cluster }

func (clusterLeases) Start(context.Context) error { return nil }

func (p clusterLeases) Stop(ctx context.Context) error {
	c := p.c
	if c.locker != nil {
		c.locker.Close()
	}
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	ls := make([]store.Lease, 0, len(c.owned))
	for _, l := range c.owned {
		ls = append(ls, l)
	}
	c.owned = map[string]store.Lease{}
	c.mu.Unlock()
	if err := c.pg.Leave(ctx, c.id); err != nil {
		c.log.Warn("cluster: leaving the membership failed; the other hosts see this host gone when its heartbeat expires", "err", err)
	}
	for _, l := range ls {
		if err := c.pg.Release(ctx, l); err != nil {
			c.log.Warn("cluster: releasing a queue's lease at shutdown failed; another host takes the queue when the lease expires", "lease", l.Name, "err", err)
		}
	}
	return nil
}

func (c *cluster) loop(ctx context.Context) {
	t := time.NewTicker(c.tick())
	defer t.Stop()
	rescan := time.NewTicker(c.rescanEvery())
	defer rescan.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		case <-rescan.C:
			c.adoptAll()
			if c.resume != nil {
				c.resume(ctx)
			}
			c.resumeQueueOps(func(string) bool { return true })
			continue
		}
		c.place(ctx)
	}
}

// rendezvous is the live member a queue hashes to.
func rendezvous(uid string, members []string) string {
	best, bestH := "", uint64(0)
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(uid))
		h.Write([]byte{0})
		h.Write([]byte(m))
		if v := h.Sum64(); best == "" || v > bestH {
			best, bestH = m, v
		}
	}
	return best
}

// place heartbeats, renews the owned leases (unloading those that moved
// on), then acquires the queues that hash to this host and releases those
// that hash to another live host.
func (c *cluster) place(ctx context.Context) {
	c.own.Lock()
	defer c.own.Unlock()
	start := time.Now()
	if err := c.pg.Heartbeat(ctx, store.Member{ID: c.id, Addr: c.advertised()}, c.ttl); err != nil && ctx.Err() == nil {
		c.log.Warn("cluster: heartbeat failed", "err", err)
	}
	c.mu.Lock()
	held := make([]store.Lease, 0, len(c.owned))
	for _, l := range c.owned {
		held = append(held, l)
	}
	c.mu.Unlock()
	if len(held) > 0 {
		renewed, err := c.renewAll(ctx, held)
		switch {
		case err == nil:
			ok := map[string]store.Lease{}
			for _, l := range renewed {
				ok[l.Name] = l
			}
			for _, l := range held {
				uid := strings.TrimPrefix(l.Name, "queue/")
				if n, found := ok[l.Name]; found {
					c.mu.Lock()
					c.owned[uid] = n
					c.validUntil[uid] = start.Add(c.ttl - c.ttl/10)
					c.mu.Unlock()
				} else {
					c.log.Warn("cluster: lost the lease of a queue; another host delivers it now", "queue", uid, "epoch", l.Epoch)
					c.unloadLocked(ctx, uid, false)
				}
			}
			c.mu.Lock()
			c.renewedAt = start
			c.mu.Unlock()
		case ctx.Err() != nil:
			return
		default:
			c.mu.Lock()
			stale := time.Since(c.renewedAt) > c.ttl
			c.mu.Unlock()
			c.log.Warn("cluster: renewing the queues' leases failed", "err", err, "givingUp", stale)
			if stale {
				// The leases may have expired: stop delivering (every
				// write would be fenced anyway).
				for _, l := range held {
					c.unloadLocked(ctx, strings.TrimPrefix(l.Name, "queue/"), false)
				}
			}
			return
		}
	} else {
		c.mu.Lock()
		c.renewedAt = start
		c.mu.Unlock()
	}
	ms, err := c.pg.Members(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cluster: reading the members failed", "err", err)
		}
		return
	}
	members := make([]string, 0, len(ms))
	self := false
	for _, m := range ms {
		members = append(members, m.ID)
		self = self || m.ID == c.id
	}
	if !self {
		members = append(members, c.id)
	}
	sort.Strings(members)
	c.mu.Lock()
	c.members = members
	var want, drop []string
	for uid := range c.queues {
		_, mine := c.owned[uid]
		if rendezvous(uid, members) == c.id {
			if !mine {
				want = append(want, uid)
			}
		} else if mine {
			drop = append(drop, uid)
		}
	}
	for uid := range c.owned {
		if _, known := c.queues[uid]; !known {
			drop = append(drop, uid)
		}
	}
	c.mu.Unlock()
	for _, uid := range drop {
		c.mu.Lock()
		_, known := c.queues[uid]
		leaving := c.leaving[uid]
		c.mu.Unlock()
		switch {
		case !known:
			c.unloadLocked(ctx, uid, true)
		case !leaving:
			c.handOverQueue(uid)
		}
	}
	for _, uid := range want {
		t0 := time.Now()
		l, err := c.pg.Acquire(ctx, queueLease(uid), c.id, c.ttl)
		if err != nil {
			if !errors.Is(err, store.ErrLeaseHeld) && ctx.Err() == nil {
				c.log.Warn("cluster: taking a queue's lease failed", "queue", uid, "err", err)
			}
			continue
		}
		c.mu.Lock()
		c.validUntil[uid] = t0.Add(c.ttl - c.ttl/10)
		c.mu.Unlock()
		c.loadLocked(ctx, uid, l)
	}
}

// renewAll renews the held leases, trying again a few times within the
// tick when a renewal fails (a cut connection, a restarting server): a
// renewal given up for a whole ttl unloads every queue of the host, so
// one failed statement must not cost a tick. The leases' validity is
// counted from the start of place, before the first try.
func (c *cluster) renewAll(ctx context.Context, held []store.Lease) ([]store.Lease, error) {
	backoff := c.tick() / 8
	for i := 1; ; i++ {
		renewed, err := c.pg.RenewAll(ctx, held, c.ttl)
		if err == nil || ctx.Err() != nil || i == 3 {
			return renewed, err
		}
		c.log.Info("cluster: renewing the queues' leases failed; trying again", "attempt", i, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// handOverQueue hands a queue that now hashes to another live host over
// without cutting the handlers it runs: the engine stops forming its
// batches and lets the running ones finish and settle while this host
// keeps renewing the lease (Engine.Quiesce, for up to handoverGrace);
// then the queue is unloaded and its lease released, and the new owner
// takes it at once. Unloading at once, as before, closed running batches
// whose handlers had often not reached their first statement: every
// membership change (a host joining, or the hosts' views of the members
// settling after a database restart) counted attempts no handler ran
// (issue #35, attempts jump). If the queue hashes to this host again by
// then, it stays (Engine.Resume); if its lease is lost meanwhile, the
// renewal has unloaded it already. own held.
func (c *cluster) handOverQueue(uid string) {
	l, ok := c.leaseOf(uid)
	if !ok {
		return
	}
	c.mu.Lock()
	c.leaving[uid] = true
	c.mu.Unlock()
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.bg, c.handoverGrace())
		err := c.eng.Quiesce(ctx, uid)
		cancel()
		if c.bg.Err() != nil {
			// Shutting down: the engine's stop lets the batches finish,
			// then every lease is released.
			return
		}
		c.own.Lock()
		defer c.own.Unlock()
		c.mu.Lock()
		delete(c.leaving, uid)
		cur, owned := c.owned[uid]
		stay := rendezvous(uid, c.members) == c.id
		c.mu.Unlock()
		switch {
		case !owned || cur.Epoch != l.Epoch:
			// Lost (and perhaps taken again) meanwhile.
		case stay:
			c.eng.Resume(uid)
		default:
			if err != nil && !errors.Is(err, abi.ErrUnknownQueue) {
				c.log.Warn("cluster: a queue's running batches did not finish within the hand-over grace; closing them", "queue", uid, "grace", c.handoverGrace().String())
			}
			c.unloadLocked(c.bg, uid, true)
		}
	})
}

// handoverGrace bounds how long a queue's hand-over waits for its running
// batches.
func (c *cluster) handoverGrace() time.Duration { return c.rescanEvery() }

// loadLocked makes the engine hold a queue whose lease this host just
// took: its messages are loaded (unsettled ones are delivered again) and
// its consumer attached. own held.
func (c *cluster) loadLocked(ctx context.Context, uid string, l store.Lease) {
	c.mu.Lock()
	cfg, known := c.queues[uid]
	c.owned[uid] = l
	cuid := c.byQueue[uid]
	ccfg, hasC := c.consumers[cuid]
	c.mu.Unlock()
	fail := func(what string, err error) {
		c.log.Warn("cluster: "+what, "queue", uid, "err", err)
		c.mu.Lock()
		delete(c.owned, uid)
		c.mu.Unlock()
		if err := c.eng.Unload(ctx, uid); err != nil {
			c.log.Warn("cluster: unloading a queue that failed to load failed", "queue", uid, "err", err)
		}
		if err := c.pg.Release(ctx, l); err != nil {
			c.log.Warn("cluster: releasing the lease of a queue that failed to load failed; it expires after the ttl", "queue", uid, "err", err)
		}
	}
	if !known {
		fail("a queue to load is gone", errors.New("unknown queue"))
		return
	}
	if err := c.eng.AddQueue(ctx, cfg); err != nil && !errors.Is(err, delivery.ErrQueueExists) {
		fail("loading a queue failed", err)
		return
	}
	if hasC && c.consumerLive(ctx, cuid) {
		if err := c.eng.Attach(ctx, ccfg); err != nil && !errors.Is(err, delivery.ErrConsumerConflict) {
			c.log.Warn("cluster: attaching a consumer failed", "queue", uid, "consumer", cuid, "err", err)
		}
	}
	c.log.Info("cluster: delivering a queue", "queue", uid, "epoch", l.Epoch)
	// Sends committed while the queue was loading announced themselves
	// before it was held: read them now.
	c.queueAdopt(uid, nil)
	// A purge or a redrive its previous owner had not finished goes on.
	c.resumeQueueOps(func(q string) bool { return q == uid })
}

// consumerLive: the stored consumer is not being created or deleted (a
// host that revoked the queue's lease to detach it has written deleting).
func (c *cluster) consumerLive(ctx context.Context, uid string) bool {
	r, err := c.pg.Resource(ctx, uid)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.Warn("cluster: reading a consumer to attach failed; it is attached at the next re-read", "consumer", uid, "err", err)
	}
	return err == nil && r.State != store.StateDeleting && r.State != store.StateCreating
}

// unloadLocked makes the engine forget a queue (without deleting its
// messages) and, with release, gives its lease up. own held.
func (c *cluster) unloadLocked(ctx context.Context, uid string, release bool) {
	c.mu.Lock()
	l, ok := c.owned[uid]
	delete(c.owned, uid)
	c.mu.Unlock()
	if err := c.eng.Unload(ctx, uid); err != nil {
		c.log.Warn("cluster: unloading a queue failed", "queue", uid, "err", err)
	}
	if ok && release {
		if err := c.pg.Release(ctx, l); err != nil {
			c.log.Warn("cluster: releasing a queue's lease failed", "queue", uid, "err", err)
		}
		c.log.Info("cluster: handed a queue over", "queue", uid)
	}
}

func (c *cluster) leaseOf(uid string) (store.Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.owned[uid]
	return l, ok
}

// Current: delivery.Remote.
func (c *cluster) Current(uid string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	until := c.validUntil[uid]
	_, ok := c.owned[uid]
	return until, ok && time.Now().Before(until)
}

// Deliverable: delivery.Remote. The room to spare is a tenth of the ttl
// (the leases are renewed every fifth).
func (c *cluster) Deliverable(uid string) bool {
	until, ok := c.Current(uid)
	return ok && time.Now().Add(c.ttl/10).Before(until)
}

func (c *cluster) isOwned(uid string) bool {
	_, ok := c.leaseOf(uid)
	return ok
}

// fenced is told that a write fenced with lease l was refused: l moved
// on. The queue is unloaded only while l is still the lease this host
// holds it by: a write made under an earlier lease and refused late (it
// waited out a database restart in pgstore's retries while this host
// lost the queue and took it again under a new epoch) says nothing of
// the current lease, and unloading then cut the handlers running under
// it, counting attempts no handler ran (issue #35, attempts jump).
func (c *cluster) fenced(uid string, l store.Lease) {
	c.log.Warn("cluster: a delivery write was fenced: another host owns the queue now", "queue", uid, "epoch", l.Epoch)
	go func() {
		c.own.Lock()
		defer c.own.Unlock()
		if cur, ok := c.leaseOf(uid); ok && cur.Epoch == l.Epoch {
			c.unloadLocked(context.Background(), uid, false)
		}
		poke(c.kick)
	}()
}

// ---- notifications ----

// Queue and Accepted: delivery.Remote, for queues another host owns.
// Queue reads the queue's record, so that a send through this host uses
// the deliveryDelaySeconds another host may have just changed (its
// announcement may still be on its way); the known configuration when
// the read fails. A queue is refused as unknown only when the store says
// so (no record, being deleted, not a queue), never because a read
// failed.
func (c *cluster) Queue(uid string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.pg.Resource(ctx, uid)
	switch {
	case err == nil && (r.FormURL != schemas.FormAtLeastOnceQueue || r.State == store.StateDeleting):
		return 0, abi.ErrUnknownQueue
	case err == nil:
		cfg, cerr := controller.QueueConfigOf(r)
		if cerr == nil {
			return cfg.DeliveryDelaySeconds, nil
		}
		c.log.Warn("cluster: a queue's record does not decode; sending with its known configuration", "queue", uid, "err", cerr)
		err = cerr
	case errors.Is(err, store.ErrNotFound):
		return 0, abi.ErrUnknownQueue
	}
	c.mu.Lock()
	cfg, ok := c.queues[uid]
	c.mu.Unlock()
	if ok {
		return cfg.DeliveryDelaySeconds, nil
	}
	return 0, fmt.Errorf("reading the record of queue %s: %w", uid, err)
}

func (c *cluster) Accepted(queueUID string, ids []string) {
	c.pmu.Lock()
	c.sends[queueUID] = append(c.sends[queueUID], ids...)
	c.pmu.Unlock()
	poke(c.sendKick)
}

// sendLoop announces accepted messages, every waiting one in one
// statement.
func (c *cluster) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.sendKick:
		}
		c.pmu.Lock()
		sends := c.sends
		c.sends = map[string][]string{}
		c.pmu.Unlock()
		var payloads []string
		for q, ids := range sends {
			// A payload is at most 8000 bytes: 100 IDs of 32 digits fit.
			for len(ids) > 0 {
				n := min(len(ids), 100)
				payloads = append(payloads, q+" "+strings.Join(ids[:n], ","))
				ids = ids[n:]
			}
		}
		if err := c.pg.NotifyAll(ctx, sendChannel, payloads); err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: announcing sends failed; the owners find them at their next re-read", "err", err)
		}
	}
}

func (c *cluster) onSend(payload string) {
	if payload == "" {
		c.adoptAll()
		return
	}
	q, ids, _ := strings.Cut(payload, " ")
	if !c.isOwned(q) {
		return
	}
	c.queueAdopt(q, strings.Split(ids, ","))
}

func (c *cluster) adoptAll() {
	c.mu.Lock()
	uids := make([]string, 0, len(c.owned))
	for uid := range c.owned {
		uids = append(uids, uid)
	}
	c.mu.Unlock()
	for _, uid := range uids {
		c.queueAdopt(uid, nil)
	}
	poke(c.chKick)
}

// queueAdopt schedules the adoption of ids (nil: every stored message) by
// the owned queue uid.
func (c *cluster) queueAdopt(uid string, ids []string) {
	c.pmu.Lock()
	cur, ok := c.adopts[uid]
	switch {
	case ids == nil || (ok && cur == nil):
		c.adopts[uid] = nil
	default:
		c.adopts[uid] = append(cur, ids...)
	}
	c.pmu.Unlock()
	poke(c.adoptKck)
}

func (c *cluster) adoptLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.adoptKck:
		}
		c.pmu.Lock()
		adopts := c.adopts
		c.adopts = map[string][]string{}
		c.pmu.Unlock()
		for uid, ids := range adopts {
			if !c.isOwned(uid) {
				continue
			}
			var ms []store.Message
			var err error
			if ids == nil {
				ms, err = c.pg.Messages(ctx, uid)
			} else {
				ms, err = c.pg.MessagesOf(ctx, uid, ids)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				c.log.Warn("cluster: reading a queue's new messages failed; retrying", "queue", uid, "err", err)
				c.queueAdopt(uid, ids)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if n := c.eng.Adopt(uid, ms); n > 0 && ids == nil {
				c.log.Info("cluster: adopted messages found by a re-read", "queue", uid, "count", n)
			}
		}
	}
}

// announce tells the other hosts that resource records changed.
func (c *cluster) announce(uids []string) {
	if len(uids) == 0 {
		return
	}
	// Queued, not sent here: the write that changed the records returns
	// at once (an Operation's outcome is visible as soon as it commits,
	// and its host must not still hold it busy while a NOTIFY goes out).
	c.pmu.Lock()
	for _, u := range uids {
		c.announces = append(c.announces, c.id+" "+u)
	}
	c.pmu.Unlock()
	poke(c.annKick)
}

// announceLoop sends the queued resource announcements, in order, every
// waiting one in one statement.
func (c *cluster) announceLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.annKick:
		}
		c.pmu.Lock()
		ps := c.announces
		c.announces = nil
		c.pmu.Unlock()
		if err := c.pg.NotifyAll(ctx, resourceChannel, ps); err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: announcing a resource change failed; the other hosts find it at their next re-read", "err", err)
		}
	}
}

func (c *cluster) onResource(payload string) {
	origin, uid, _ := strings.Cut(payload, " ")
	if payload != "" && origin == c.id {
		return
	}
	c.pmu.Lock()
	c.changes = append(c.changes, uid) // "" (a reconnect): re-read everything
	c.pmu.Unlock()
	poke(c.chKick)
}

func (c *cluster) changeLoop(ctx context.Context) {
	t := time.NewTicker(c.rescanEvery())
	defer t.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-c.chKick:
		case <-t.C:
			all = true
		}
		c.pmu.Lock()
		changes := c.changes
		c.changes = nil
		c.pmu.Unlock()
		seen := map[string]bool{}
		for _, uid := range changes {
			if uid == "" {
				all = true
			}
		}
		if all {
			c.resyncAll(ctx)
			continue
		}
		for _, uid := range changes {
			if seen[uid] {
				continue
			}
			seen[uid] = true
			c.resync(ctx, uid)
		}
	}
}

// resyncAll re-reads every queue and consumer (after a lost
// notification connection, and periodically).
func (c *cluster) resyncAll(ctx context.Context) {
	qs, err := c.pg.Resources(ctx, "", schemas.FormAtLeastOnceQueue)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cluster: re-reading the queues failed; trying at the next re-read", "err", err)
		}
		return
	}
	cs, err := c.pg.Resources(ctx, "", schemas.FormQueueConsumer)
	if err == nil {
		var pcs []store.Resource
		pcs, err = c.pg.Resources(ctx, "", schemas.FormPullConsumer)
		cs = append(cs, pcs...)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cluster: re-reading the consumers failed; trying at the next re-read", "err", err)
		}
		return
	}
	seen := map[string]bool{}
	for _, r := range append(qs, cs...) {
		seen[r.UID] = true
		c.apply(ctx, r.UID, r, true)
	}
	c.mu.Lock()
	var gone []string
	for uid := range c.queues {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	for uid := range c.consumers {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	c.mu.Unlock()
	for _, uid := range gone {
		c.apply(ctx, uid, store.Resource{}, false)
	}
}

// resync re-reads one resource another host changed.
func (c *cluster) resync(ctx context.Context, uid string) {
	r, err := c.pg.Resource(ctx, uid)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.apply(ctx, uid, store.Resource{}, false)
	case err != nil:
		c.log.Warn("cluster: re-reading a changed resource failed", "resource", uid, "err", err)
		return
	default:
		c.apply(ctx, uid, r, true)
	}
	if c.reindex != nil {
		c.reindex(ctx, uid)
	}
}

// apply brings the engine in step with a stored queue or consumer (found
// false: gone).
func (c *cluster) apply(ctx context.Context, uid string, r store.Resource, found bool) {
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	_, isQ := c.queues[uid]
	_, isC := c.consumers[uid]
	c.mu.Unlock()
	if found {
		isQ = r.FormURL == schemas.FormAtLeastOnceQueue
		isC = r.FormURL == schemas.FormQueueConsumer || r.FormURL == schemas.FormPullConsumer
	}
	switch {
	case isQ && (!found || r.State == store.StateDeleting):
		c.mu.Lock()
		delete(c.queues, uid)
		c.mu.Unlock()
		if c.isOwned(uid) {
			c.unloadLocked(ctx, uid, true)
		}
	case isQ:
		cfg, err := controller.QueueConfigOf(r)
		if err != nil {
			c.log.Warn("cluster: a queue's record does not decode; keeping its known configuration", "queue", uid, "err", err)
			return
		}
		c.mu.Lock()
		_, had := c.queues[uid]
		c.queues[uid] = cfg
		c.mu.Unlock()
		if c.isOwned(uid) {
			if err := c.eng.UpdateQueue(ctx, cfg); err != nil {
				c.log.Warn("cluster: updating a queue changed on another host failed", "queue", uid, "err", err)
			}
		} else if !had {
			poke(c.kick)
		}
	case isC && (!found || r.State == store.StateDeleting || r.State == store.StateCreating):
		c.mu.Lock()
		cfg, had := c.consumers[uid]
		delete(c.consumers, uid)
		if had && c.byQueue[cfg.QueueUID] == uid {
			delete(c.byQueue, cfg.QueueUID)
		}
		c.mu.Unlock()
		if had && c.isOwned(cfg.QueueUID) {
			c.wg.Go(func() { c.detachOwned(uid) })
		}
	case isC:
		cfg, err := consumerConfigOf(r)
		if err != nil {
			c.log.Warn("cluster: a consumer's record does not decode; keeping its known configuration", "consumer", uid, "err", err)
			return
		}
		c.mu.Lock()
		c.consumers[uid] = cfg
		c.byQueue[cfg.QueueUID] = uid
		c.mu.Unlock()
		if c.isOwned(cfg.QueueUID) {
			if att, _ := c.eng.ConsumerAttached(ctx, uid); att {
				if err := c.eng.UpdateConsumer(ctx, cfg); err != nil {
					c.log.Warn("cluster: updating a consumer changed on another host failed", "consumer", uid, "err", err)
				}
			} else if err := c.eng.Attach(ctx, cfg); err != nil {
				c.log.Warn("cluster: attaching a consumer changed on another host failed", "consumer", uid, "err", err)
			}
		}
	}
}

// ---- the engine as the controller sees it (controller.Engine) ----

// clusterEngine is the controller's view of the delivery engine on a host
// of a cluster: every queue and consumer is known, the engine holds only
// the owned ones.
type clusterEngine struct{ c *cluster }

func (ce clusterEngine) AddQueue(ctx context.Context, cfg delivery.QueueConfig) error {
	c := ce.c
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	_, had := c.queues[cfg.UID]
	c.queues[cfg.UID] = cfg
	c.mu.Unlock()
	if c.isOwned(cfg.UID) {
		if err := c.eng.AddQueue(ctx, cfg); err != nil && !errors.Is(err, delivery.ErrQueueExists) {
			return err
		}
	} else if !had {
		poke(c.kick)
	}
	return nil
}

func (ce clusterEngine) UpdateQueue(ctx context.Context, cfg delivery.QueueConfig) error {
	c := ce.c
	ce.ensure(ctx, cfg.UID)
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	_, had := c.queues[cfg.UID]
	if had {
		c.queues[cfg.UID] = cfg
	}
	c.mu.Unlock()
	if !had {
		return abi.ErrUnknownQueue
	}
	if c.isOwned(cfg.UID) {
		return c.eng.UpdateQueue(ctx, cfg)
	}
	return nil
}

// RemoveQueue deletes the queue's messages. When another host owns it,
// its lease is revoked first, so that no delivery write of the owner can
// land after the drop.
func (ce clusterEngine) RemoveQueue(ctx context.Context, uid string) error {
	c := ce.c
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	delete(c.queues, uid)
	c.mu.Unlock()
	if c.isOwned(uid) {
		if err := c.eng.RemoveQueue(ctx, uid); err != nil {
			return err
		}
		c.unloadLocked(ctx, uid, true)
		return nil
	}
	if err := c.pg.Revoke(ctx, queueLease(uid)); err != nil {
		return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	if err := c.plain.Apply(ctx, store.DropQueue{Queue: uid}); err != nil {
		return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	return nil
}

// ensure reads a queue or consumer this host has not heard of yet (its
// creation on another host is announced, but the announcement may still
// be on its way). own not held.
func (ce clusterEngine) ensure(ctx context.Context, uid string) {
	c := ce.c
	c.mu.Lock()
	_, q := c.queues[uid]
	_, k := c.consumers[uid]
	c.mu.Unlock()
	if q || k {
		return
	}
	r, err := c.pg.Resource(ctx, uid)
	if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
		c.log.Warn("cluster: reading a resource not heard of yet failed", "resource", uid, "err", err)
	}
	if err == nil && (r.FormURL == schemas.FormAtLeastOnceQueue || r.FormURL == schemas.FormQueueConsumer || r.FormURL == schemas.FormPullConsumer) {
		c.apply(ctx, uid, r, true)
	}
}

func (ce clusterEngine) known(uid string) bool {
	ce.c.mu.Lock()
	defer ce.c.mu.Unlock()
	_, ok := ce.c.queues[uid]
	return ok
}

func (ce clusterEngine) QueueStats(ctx context.Context, uid string) (int, error) {
	ce.ensure(ctx, uid)
	if ce.c.isOwned(uid) {
		if n, err := ce.c.eng.QueueStats(ctx, uid); err == nil {
			return n, nil
		}
	}
	if !ce.known(uid) {
		return 0, abi.ErrUnknownQueue
	}
	n, err := ce.c.pg.MessageCount(ctx, uid)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	return n, nil
}

func (ce clusterEngine) Attach(ctx context.Context, cfg delivery.ConsumerConfig) error {
	c := ce.c
	ce.ensure(ctx, cfg.QueueUID)
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	if _, ok := c.queues[cfg.QueueUID]; !ok {
		c.mu.Unlock()
		return abi.ErrUnknownQueue
	}
	if other, ok := c.byQueue[cfg.QueueUID]; ok && other != cfg.UID {
		c.mu.Unlock()
		return delivery.ErrConsumerConflict
	}
	if _, ok := c.consumers[cfg.UID]; ok {
		c.mu.Unlock()
		return delivery.ErrConsumerConflict
	}
	c.consumers[cfg.UID] = cfg
	c.byQueue[cfg.QueueUID] = cfg.UID
	c.mu.Unlock()
	if c.isOwned(cfg.QueueUID) {
		if err := c.eng.Attach(ctx, cfg); err != nil {
			c.mu.Lock()
			delete(c.consumers, cfg.UID)
			delete(c.byQueue, cfg.QueueUID)
			c.mu.Unlock()
			return err
		}
	}
	return nil
}

func (ce clusterEngine) UpdateConsumer(ctx context.Context, cfg delivery.ConsumerConfig) error {
	c := ce.c
	ce.ensure(ctx, cfg.UID)
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	old, ok := c.consumers[cfg.UID]
	if ok && (old.QueueUID != cfg.QueueUID || old.WorkerUID != cfg.WorkerUID) {
		c.mu.Unlock()
		return fmt.Errorf("%w: queue and worker of a consumer are immutable", delivery.ErrInvalidConfig)
	}
	if ok {
		c.consumers[cfg.UID] = cfg
	}
	c.mu.Unlock()
	if !ok {
		return delivery.ErrUnknownConsumer
	}
	if c.isOwned(cfg.QueueUID) {
		return c.eng.UpdateConsumer(ctx, cfg)
	}
	return nil
}

// Detach stops the consumer. On the queue's owner, the engine's Detach
// (running batches end, nothing unsettled is acknowledged). On another
// host, the owner is asked to detach it and answers once it has (see
// detachRemote).
func (ce clusterEngine) Detach(ctx context.Context, uid string) error {
	c := ce.c
	ce.ensure(ctx, uid)
	c.own.Lock()
	defer c.own.Unlock()
	c.mu.Lock()
	cfg, ok := c.consumers[uid]
	c.mu.Unlock()
	if !ok {
		return c.eng.Detach(ctx, uid)
	}
	if c.isOwned(cfg.QueueUID) {
		if err := c.eng.Detach(ctx, uid); err != nil {
			return err
		}
	} else {
		c.own.Unlock()
		err := c.detachRemote(ctx, uid, cfg.QueueUID)
		c.own.Lock()
		if err != nil {
			return err
		}
	}
	c.mu.Lock()
	delete(c.consumers, uid)
	if c.byQueue[cfg.QueueUID] == uid {
		delete(c.byQueue, cfg.QueueUID)
	}
	c.mu.Unlock()
	return nil
}

// ChangedQueues: the queues this host's engine holds whose count or
// existence changed (loading or unloading a queue on an ownership move is
// one). A queue another host owns is observed by its owner, whose engine
// reports its changes; a record another host writes reaches the
// controller through Reindex, which marks it for observation.
func (ce clusterEngine) ChangedQueues() []string { return ce.c.eng.ChangedQueues() }

func (ce clusterEngine) ConsumerAttached(ctx context.Context, uid string) (bool, error) {
	ce.ensure(ctx, uid)
	ce.c.mu.Lock()
	defer ce.c.mu.Unlock()
	_, ok := ce.c.consumers[uid]
	return ok, nil
}

// Inspect: the owner's engine, or (another host owns the queue) the
// stored messages: leased ones count as in flight.
func (ce clusterEngine) Inspect(ctx context.Context, uid string) (delivery.QueueInspection, error) {
	ce.ensure(ctx, uid)
	if ce.c.isOwned(uid) {
		if in, err := ce.c.eng.Inspect(ctx, uid); err == nil {
			return in, nil
		}
	}
	ce.c.mu.Lock()
	cfg, ok := ce.c.queues[uid]
	ce.c.mu.Unlock()
	if !ok {
		return delivery.QueueInspection{}, abi.ErrUnknownQueue
	}
	ms, err := ce.c.pg.Messages(ctx, uid)
	if err != nil {
		return delivery.QueueInspection{}, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	return delivery.InspectStored(ms, cfg, time.Now().UTC().UnixMilli()), nil
}

func (ce clusterEngine) MessagePage(ctx context.Context, uid string, after delivery.Cursor, limit int) ([]delivery.MessageInfo, delivery.Cursor, bool, error) {
	// Always from the store, so that a listing paged across hosts (any
	// host serves the next page) sees one order.
	ce.ensure(ctx, uid)
	if !ce.known(uid) {
		return nil, delivery.Cursor{}, false, abi.ErrUnknownQueue
	}
	ms, err := ce.c.pg.Messages(ctx, uid)
	if err != nil {
		return nil, delivery.Cursor{}, false, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	p, n, more := delivery.PageStored(ms, after, limit, time.Now().UTC().UnixMilli())
	return p, n, more, nil
}

// ---- the stores ----

// clusterStore is the store as the controller and the API write it: every
// write that changes a resource record is announced to the other hosts.
type clusterStore struct {
	*pgstore.Store
	c *cluster
}

func (s clusterStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	if err := s.Store.Apply(ctx, muts...); err != nil {
		return err
	}
	var uids []string
	for _, m := range muts {
		switch m := m.(type) {
		case store.PutResource:
			uids = append(uids, m.Resource.UID)
		case store.DeleteResource:
			uids = append(uids, m.UID)
		}
	}
	s.c.announce(uids)
	return nil
}

// Close: the cluster part closes nothing; the store part closes the
// database.
func (s clusterStore) Close() error { return s.Store.Close() }

// fencedStore is the store as the delivery engine writes it: a write of a
// queue's deliveries, settlements and removals commits only while this
// host holds the queue's lease, checked in the write's transaction. Sends
// (AcceptMessage alone) are not fenced: any host accepts them.
type fencedStore struct {
	*pgstore.Store
	c *cluster
}

func (s fencedStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	q := ""
	for _, m := range muts {
		switch m := m.(type) {
		case store.DeliverMessages:
			q = m.Queue
		case store.ExtendLease:
			q = m.Queue
		case store.RetryMessage:
			q = m.Queue
		case store.RemoveMessages:
			q = m.Queue
		case store.DropQueue:
			q = m.Queue
		}
		if q != "" {
			break
		}
	}
	if q == "" {
		return s.Store.Apply(ctx, muts...)
	}
	l, ok := s.c.leaseOf(q)
	if !ok {
		return fmt.Errorf("%w: %w: queue %s is not owned by this host", store.ErrUnavailable, store.ErrFenced, q)
	}
	err := s.Store.ApplyFenced(ctx, l, muts...)
	if errors.Is(err, store.ErrFenced) {
		s.c.fenced(q, l)
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// detachRemote asks the owner of queueUID to detach the consumer and
// waits for its answer, asking again every tick (the owner may have
// changed). With no live owner nothing of the queue runs: done.
func (c *cluster) detachRemote(ctx context.Context, uid, queueUID string) error {
	ch := make(chan struct{}, 1)
	c.dmu.Lock()
	c.detachWait[uid] = append(c.detachWait[uid], ch)
	c.dmu.Unlock()
	defer func() {
		c.dmu.Lock()
		ws := c.detachWait[uid]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(c.detachWait, uid)
		} else {
			c.detachWait[uid] = ws
		}
		c.dmu.Unlock()
	}()
	for {
		if c.isOwned(queueUID) {
			// The queue moved here meanwhile.
			return c.eng.Detach(ctx, uid)
		}
		live, err := c.pg.LeaseHeld(ctx, queueLease(queueUID))
		if err != nil {
			return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
		}
		if !live {
			return nil
		}
		if err := c.pg.NotifyAll(ctx, detachChannel, []string{uid + " " + queueUID}); err != nil {
			return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("detach of consumer %s: its queue's owner has not answered: %w", uid, ctx.Err())
		case <-time.After(c.tick()):
		}
	}
}

func (c *cluster) onDetach(payload string) {
	uid, q, _ := strings.Cut(payload, " ")
	if !c.isOwned(q) {
		return
	}
	c.mu.Lock()
	if cfg, ok := c.consumers[uid]; ok {
		delete(c.consumers, uid)
		if c.byQueue[cfg.QueueUID] == uid {
			delete(c.byQueue, cfg.QueueUID)
		}
	}
	c.mu.Unlock()
	c.wg.Go(func() { c.detachOwned(uid) })
}

// detachOwned detaches a consumer of an owned queue (waiting for its
// running handlers, as a single host does) and answers whoever asked.
func (c *cluster) detachOwned(uid string) {
	ctx, cancel := context.WithTimeout(c.bg, 2*time.Minute)
	defer cancel()
	if err := c.eng.Detach(ctx, uid); err != nil {
		c.log.Warn("cluster: detaching a consumer deleted on another host failed", "consumer", uid, "err", err)
		return
	}
	if err := c.pg.NotifyAll(ctx, detachedChannel, []string{uid}); err != nil {
		c.log.Warn("cluster: announcing a detach failed", "consumer", uid, "err", err)
	}
}

func (c *cluster) onDetached(uid string) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	for _, ch := range c.detachWait[uid] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Purge and MoveNext run on the engine that holds the queue: here when
// this host owns it. Else (or when the queue moved on under the call)
// delivery.ErrElsewhere tells the controller to leave the Operation to the
// owner, which it asks, through Options.HandOff, to carry it out
// (handOver); a host that takes a queue over resumes its unfinished
// Operations too.
func (ce clusterEngine) Purge(ctx context.Context, uid string, extra func(int) []store.Mutation) (int, error) {
	c := ce.c
	c.loaded(uid)
	if c.isOwned(uid) {
		// Messages sent through other hosts whose announcement has not
		// been adopted yet are removed by the purge all the same; adopted
		// first, they are counted in its outcome.
		ce.Refresh(ctx, uid)
		n, err := c.eng.Purge(ctx, uid, extra)
		if err == nil || c.isOwned(uid) || ctx.Err() != nil {
			return n, err
		}
	}
	return 0, delivery.ErrElsewhere
}

func (ce clusterEngine) MoveNext(ctx context.Context, req delivery.MoveRequest) (delivery.MoveResult, error) {
	c := ce.c
	c.loaded(req.From)
	if c.isOwned(req.From) {
		if req.After == (delivery.Cursor{}) {
			// A redrive's first step (or its resumption): every message
			// stored by then is held, so none is left behind.
			ce.Refresh(ctx, req.From)
		}
		res, err := c.eng.MoveNext(ctx, req)
		if err == nil || c.isOwned(req.From) || ctx.Err() != nil {
			return res, err
		}
	}
	return delivery.MoveResult{}, delivery.ErrElsewhere
}

// Refresh (controller: before a purge's or a redrive's admission counts
// the queue) makes the owner's engine adopt every stored message of the
// queue it has not adopted yet (sent through other hosts, their
// announcement still on its way).
func (ce clusterEngine) Refresh(ctx context.Context, uid string) {
	c := ce.c
	c.loaded(uid)
	if !c.isOwned(uid) {
		return
	}
	ms, err := c.pg.Messages(ctx, uid)
	if err != nil {
		c.log.Warn("cluster: reading a queue's messages before counting them failed; messages sent through other hosts and not adopted yet are left out", "queue", uid, "err", err)
		return
	}
	c.eng.Adopt(uid, ms)
}

// loaded waits, when this host has just taken uid's lease, until its
// engine has loaded the queue (loadLocked runs under own).
func (c *cluster) loaded(uid string) {
	if c.isOwned(uid) && !c.eng.Holds(uid) {
		c.own.Lock()
		c.own.Unlock() //nolint:staticcheck // a barrier: the load in progress has ended
	}
}

// handOver asks the owner of a queue to drive its unfinished purges and
// redrives. A lost notification is made up for by the owner's periodic
// re-read (rescanEvery), and a queue with no live owner has its
// Operations resumed by the host that takes it.
func (c *cluster) handOver(uid string) {
	ctx, cancel := context.WithTimeout(c.bg, 5*time.Second)
	defer cancel()
	if err := c.pg.NotifyAll(ctx, queueOpChannel, []string{uid}); err != nil {
		c.log.Warn("cluster: handing a queue operation to the queue's owner failed; it finds it at its next re-read", "queue", uid, "err", err)
	}
}

func (c *cluster) onQueueOp(uid string) {
	if !c.isOwned(uid) {
		return
	}
	c.resumeQueueOps(func(q string) bool { return q == uid })
}

// resumeQueueOps drives the unfinished purges and redrives of the owned
// queues for which want is true.
func (c *cluster) resumeQueueOps(want func(string) bool) {
	if c.resumeQueue == nil {
		return
	}
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.bg, time.Minute)
		defer cancel()
		c.resumeQueue(ctx, func(q string) bool { return c.isOwned(q) && want(q) })
	})
}

// CancelElsewhere (controller Options.CancelElsewhere) asks the owner of a
// redrive's queue to cancel it and waits for its answer, asking again
// every tick (the owner may change). handled false: this host owns the
// queue and records the cancel itself.
func (c *cluster) CancelElsewhere(ctx context.Context, op store.Operation, by string) (bool, error) {
	uid := op.ResourceUID
	ch := make(chan struct{}, 1)
	c.dmu.Lock()
	c.cancelWait[op.ID] = append(c.cancelWait[op.ID], ch)
	c.dmu.Unlock()
	defer func() {
		c.dmu.Lock()
		ws := c.cancelWait[op.ID]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(c.cancelWait, op.ID)
		} else {
			c.cancelWait[op.ID] = ws
		}
		c.dmu.Unlock()
	}()
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if c.isOwned(uid) {
			return false, nil
		}
		live, err := c.pg.LeaseHeld(wait, queueLease(uid))
		if err != nil {
			return false, err
		}
		if !live {
			// No host delivers the queue: the cancel is recorded here
			// under its lease (taken by a holder of its own, so that
			// this host's placement does not count it as delivering
			// it), so that the host that takes the queue next reads
			// it before any move.
			l, err := c.pg.Acquire(wait, queueLease(uid), c.id+"#cancel", c.ttl)
			if errors.Is(err, store.ErrLeaseHeld) {
				continue
			}
			if err != nil {
				return false, err
			}
			var pb *problem.Problem
			err = c.cancelOp(wait, op.ID, by)
			if rerr := c.pg.Release(context.WithoutCancel(wait), l); rerr != nil {
				c.log.Warn("cluster: releasing a queue's lease taken to record a cancel failed; it expires after the ttl", "queue", uid, "err", rerr)
			}
			if err != nil && !(errors.As(err, &pb) && pb.Code == problem.CodeNotCancellable) {
				return false, err
			}
			return true, nil
		}
		if err := c.pg.NotifyAll(wait, cancelChannel, []string{uid + " " + op.ID + " " + by}); err != nil {
			return false, err
		}
		select {
		case <-ch:
			return true, nil
		case <-wait.Done():
			return false, fmt.Errorf("cancel of Operation %s: its queue's owner has not answered: %w", op.ID, wait.Err())
		case <-time.After(c.tick()):
		}
	}
}

func (c *cluster) onCancel(payload string) {
	uid, rest, _ := strings.Cut(payload, " ")
	id, by, _ := strings.Cut(rest, " ")
	if !c.isOwned(uid) || c.cancelOp == nil {
		return
	}
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.bg, time.Minute)
		defer cancel()
		var pb *problem.Problem
		if err := c.cancelOp(ctx, id, by); err != nil && !(errors.As(err, &pb) && pb.Code == problem.CodeNotCancellable) {
			c.log.Warn("cluster: cancelling a redrive asked by another host failed", "operation", id, "err", err)
			return
		}
		if err := c.pg.NotifyAll(ctx, cancelledChannel, []string{id}); err != nil {
			c.log.Warn("cluster: answering a cancel failed", "operation", id, "err", err)
		}
	})
}

func (c *cluster) onCancelled(id string) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	for _, ch := range c.cancelWait[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// claimOperation takes the lease "op/<id>" for as long as this host drives
// the Operation (renewed every third of the ttl), so that no other host
// drives it at the same time; false when another host holds it.
func (c *cluster) claimOperation(ctx context.Context, id string) (func(), bool) {
	l, err := c.pg.Acquire(ctx, "op/"+id, c.id, c.ttl)
	if err != nil {
		return nil, false
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(c.ttl / 3):
			}
			n, err := c.pg.Renew(context.Background(), l, c.ttl)
			if err != nil {
				c.log.Warn("cluster: renewing the claim of an Operation failed", "operation", id, "err", err)
				continue
			}
			l = n
		}
	})
	return func() {
		close(done)
		wg.Wait()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.pg.Forget(rctx, l); err != nil {
			c.log.Warn("cluster: forgetting the claim of an Operation failed; it expires after the ttl", "operation", id, "err", err)
		}
	}, true
}
