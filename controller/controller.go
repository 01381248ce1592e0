package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/startstop"
	"github.com/takoform/queuehost/runtime/store"
)

// Limits the controller enforces (spec/host-api.md).
const (
	MaxResourcesPerSpace = 10000
	// MaxModuleBytes is the runtime's limit on a WorkerVersion's modules
	// (spec/runtime-abi.md §WorkerVersion).
	MaxModuleBytes = 4 << 20
	// OfferingEmbedded is the default offering of every Form.
	OfferingEmbedded = "embedded"
	// OfferingSerialized is the host extension "serialized queue" of
	// AtLeastOnceQueue (spec/peers.md §Serialized queues): delivery in
	// accept order, one batch at a time. Fixed at creation.
	OfferingSerialized = "serialized"
)

// Engine is what the controller needs of the delivery engine
// (runtime/delivery.Engine implements it).
type Engine interface {
	AddQueue(ctx context.Context, q delivery.QueueConfig) error
	UpdateQueue(ctx context.Context, q delivery.QueueConfig) error
	// RemoveQueue forgets the queue and deletes its messages.
	RemoveQueue(ctx context.Context, uid string) error
	// QueueStats is the number of messages the queue holds;
	// abi.ErrUnknownQueue when the engine does not hold it.
	QueueStats(ctx context.Context, uid string) (int, error)
	Attach(ctx context.Context, c delivery.ConsumerConfig) error
	UpdateConsumer(ctx context.Context, c delivery.ConsumerConfig) error
	// Detach returns nil only once no handler of the consumer runs and
	// everything unsettled was left for redelivery.
	Detach(ctx context.Context, consumerUID string) error
	// ConsumerAttached reports whether the engine holds the consumer: what
	// observed.consumerAttached says.
	ConsumerAttached(ctx context.Context, consumerUID string) (bool, error)
	// Inspect counts the queue's messages by state (the inspection
	// extension and the conditional delete, spec/peers.md);
	// abi.ErrUnknownQueue when the engine does not hold it.
	Inspect(ctx context.Context, uid string) (delivery.QueueInspection, error)
	// MessagePage lists up to limit messages after the cursor, in accept
	// order, and whether more follow.
	MessagePage(ctx context.Context, uid string, after delivery.Cursor, limit int) ([]delivery.MessageInfo, delivery.Cursor, bool, error)
	// ChangedQueues lists the queues whose message count or existence
	// changed since the last call, each once; a change after it returns
	// is in the next list. The observer re-observes only those queues.
	ChangedQueues() []string
	// Purge removes every message of the queue in one store write with
	// the mutations extra returns (the purge extension, spec/peers.md);
	// abi.ErrUnknownQueue when the engine does not hold it.
	Purge(ctx context.Context, uid string, extra func(removed int) []store.Mutation) (int, error)
	// MoveNext moves one message of a queue to another as a new message,
	// in one store write with the request's extra mutations (the redrive
	// extension).
	MoveNext(ctx context.Context, req delivery.MoveRequest) (delivery.MoveResult, error)
}

// Workers is what the controller needs of the JavaScript runtime.
type Workers interface {
	// Compile loads v's modules and returns the handlers its default
	// export provides ("fetch", "queue"). A *abi.CompileError reports
	// modules that do not load.
	Compile(ctx context.Context, v *abi.Version) ([]string, error)
	// Evict drops whatever the runtime caches for a deleted version.
	Evict(versionUID string)
	// ForgetWorker drops what the runtime keeps for a deleted ModuleWorker
	// (its log).
	ForgetWorker(workerUID string)
}

// Options configures a Controller. Store, Engine and Workers are required.
type Options struct {
	Store   store.Store
	Engine  Engine
	Workers Workers
	// Forms is the Form registry; Builtin() when nil.
	Forms *Registry
	// ExternalQueues observes the queues whose messages live on a broker
	// (runtime/broker); nil without brokers.
	ExternalQueues ExternalQueues
	// Logger gets the controller's events; slog.Default when nil.
	Logger *slog.Logger
	// ObserveInterval is how often observed is refreshed and unsettled
	// Operations are retried; 10 s when zero.
	ObserveInterval time.Duration
	// SyncWait is how long Run waits for an Operation before returning it
	// unfinished; 2 s when zero.
	SyncWait time.Duration
	// Versions resolves workers to their selected versions; a new one over
	// Store when nil. The host shares it with the delivery engine's
	// resolver, so that both reuse the decoded versions.
	Versions *Versions
	// MaxResourcesPerSpace is 10 000 when zero.
	MaxResourcesPerSpace int
	// AfterIntent, when set, runs after an Operation and its intent are
	// journaled and before its effect: a test hook (the crash tests pause
	// here and kill the host).
	AfterIntent func(ctx context.Context, op store.Operation)
	// ObservationPaused, when set, is a test hook (the conformance kit's
	// observation-control capability): while it reports true for a
	// resource, the host makes no observation of it, and its observed
	// keeps what was confirmed before ({} for one created since); it is
	// observed on the first pass after the pause ends.
	ObservationPaused func(space, uid string) bool
	// Now is time.Now when nil.
	Now func() time.Time
	// SharedLock, when set, is a lock per space shared by every host of
	// a store several hosts use (spec/cluster.md): admission holds it,
	// besides its own, from its checks until its write is done, so that
	// two hosts deciding at once cannot both admit conflicting requests.
	// The host's resources changed by other hosts are then also read
	// back from the store (busy).
	SharedLock func(ctx context.Context, space string) (release func(), err error)
	// ClaimOperation, when set, lets one host of a shared store drive an
	// Operation at a time: drive claims it first and skips it when
	// another host holds it (ResumeUnfinished picks up those whose host
	// died).
	ClaimOperation func(ctx context.Context, id string) (release func(), ok bool)
	// CancelElsewhere, when set (a host of a cluster), asks the host that
	// carries a redrive out (its queue's owner) to cancel it, in the name
	// of by, and waits for its answer (with no owner, it records the
	// cancel itself through CancelQueueOp under the queue's lease);
	// handled false: this host owns the queue, so the cancel is recorded
	// here.
	CancelElsewhere func(ctx context.Context, op store.Operation, by string) (handled bool, err error)
	// HandOff, when set (a host of a cluster), is told of a purge or a
	// redrive this host stopped driving because another host delivers
	// its queue, once drive has let it go (ClaimOperation released): the
	// host asks the queue's owner to carry it out.
	HandOff func(op store.Operation)
	// MaxPublishKeysPerSpace bounds the publishes with an
	// Idempotency-Key a space records per PublishKeyWindow;
	// MaxPublishKeysPerSpace (100 000) when zero.
	MaxPublishKeysPerSpace int
	// Sender, when set, is the send the publish extension goes through
	// (spec/peers.md §Publish): the engine's, which the producer Binding
	// uses. Without it a publish is refused.
	Sender Sender
	// Puller leases and settles the messages of pull consumers' queues
	// (ext_pull.go); nil: the lease routes answer backend_unavailable.
	Puller Puller
	// History, when set, answers a queue's recent figures, oldest first
	// (the history extension, QueueHistory); nil answers none.
	History func(queueUID string) []HistoryPoint
}

// Controller is the resource controller: admission, Operations, the
// observer and the reconciler, over a Form registry.
type Controller struct {
	st    store.Store
	forms *Registry
	env   *Env
	log   *slog.Logger
	opts  Options
	now   func() time.Time

	// spaces serialises the admissions of a space (checks and
	// reservations); resources serialises the writes of one resource
	// record (see pending.go).
	spaces    keyLocks
	resources keyLocks
	// publishKeys serialises the publishes of one Idempotency-Key
	// (ext_publish.go).
	publishKeys keyLocks
	// publishQuota bounds the keyed publishes a space records.
	publishQuota keyQuota
	pending      pendingSet

	opMu sync.Mutex
	// inflight maps a resource UID to its unresolved Operation.
	inflight map[string]inflightOp
	watches  map[string]chan struct{} // Operation ID -> closed on its next change
	driving  map[string]bool          // Operation IDs being driven now
	retry    map[string]bool          // Operation IDs the reconciler re-drives

	// queueOps are the purge and redrive Operations this process drives
	// (ext_queueops.go): Operation ID -> *queueOpTask.
	queueOps sync.Map
	// handedOff: purges and redrives whose run just handed them to the
	// queue's owner (afterHandOff).
	handedOff sync.Map

	summaries summaryCache // list summaries (summary.go)

	obs  observer // see observe.go
	refs refIndex // see refindex.go

	// The observer, the reconciler and the Operations driven in the
	// background run on the Base's goroutines: Stop ends and awaits them.
	life    startstop.Base
	started bool
}

// New builds a controller. Call Start before admitting anything, so that
// the engine holds the stored queues and consumers and unfinished
// Operations resume.
func New(opts Options) (*Controller, error) {
	if opts.Store == nil || opts.Engine == nil || opts.Workers == nil {
		return nil, errors.New("controller: Store, Engine and Workers are required")
	}
	if opts.Forms == nil {
		opts.Forms = Builtin()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ObserveInterval <= 0 {
		opts.ObserveInterval = 10 * time.Second
	}
	if opts.SyncWait <= 0 {
		opts.SyncWait = 2 * time.Second
	}
	if opts.MaxResourcesPerSpace <= 0 {
		opts.MaxResourcesPerSpace = MaxResourcesPerSpace
	}
	if opts.MaxPublishKeysPerSpace <= 0 {
		opts.MaxPublishKeysPerSpace = MaxPublishKeysPerSpace
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Versions == nil {
		opts.Versions = NewVersions(opts.Store)
	}
	c := &Controller{
		st: opts.Store, forms: opts.Forms, log: opts.Logger, opts: opts, now: opts.Now,
		env:      &Env{Engine: opts.Engine, Workers: opts.Workers, Versions: opts.Versions, Store: opts.Store, Queues: opts.ExternalQueues},
		inflight: map[string]inflightOp{}, watches: map[string]chan struct{}{},
		driving: map[string]bool{}, retry: map[string]bool{},
	}
	c.obs.gone = c.env.forgetSpec
	return c, nil
}

// Forms is the controller's Form registry.
func (c *Controller) Forms() *Registry { return c.forms }

// Versions is the controller's version resolver.
func (c *Controller) Versions() *Versions { return c.env.Versions }

// Stop stops the observer and the reconciler and waits for Operations
// being driven to return (an Operation cut short stays journaled and
// resumes on the next start). ctx bounds the wait.
func (c *Controller) Stop(ctx context.Context) error { return c.life.Stop(ctx) }

func (c *Controller) goBackground(f func(ctx context.Context)) { c.life.Go(f) }

// keyLocks is a lock per key (a space, a resource UID), kept while used.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock takes the lock of key; the returned func releases it.
func (l *keyLocks) lock(space string) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*keyLock{}
	}
	sl := l.m[space]
	if sl == nil {
		sl = &keyLock{}
		l.m[space] = sl
	}
	sl.refs++
	l.mu.Unlock()
	sl.mu.Lock()
	return func() {
		sl.mu.Unlock()
		l.mu.Lock()
		if sl.refs--; sl.refs == 0 {
			delete(l.m, space)
		}
		l.mu.Unlock()
	}
}
