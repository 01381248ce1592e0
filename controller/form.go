package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// Form is everything the controller knows of one Form: one implementation
// per Form, one file each (form_queue.go, form_consumer.go, form_worker.go,
// form_version.go). The controller's generic code (admission, Operations,
// observation, rebuild) asks the registry for the resource's Form and
// calls these methods; nothing outside the Forms switches on a Form URL.
type Form interface {
	// URL is the Form's URL, matched exactly.
	URL() string
	// Name is the Form's name and version, for messages
	// ("AtLeastOnceQueue 0.2.0").
	Name() string
	// Offerings lists the offerings the Form is served in; the first is
	// the default.
	Offerings() []string
	// Validate checks spec and privateInputs against the Form's schemas
	// (admission step 4). A violation list is invalid_spec; an error is a
	// body that is not JSON.
	Validate(spec, privateInputs []byte) ([]schemas.Violation, error)
	// References lists the resources a spec (already valid) names
	// (admission steps 7 and 8, the deletion rule, observation).
	References(spec []byte) ([]Reference, error)
	// Prepare completes a record to be created before admission takes the
	// space's lock: the private inputs it keeps, anything derived from
	// the spec (a WorkerVersion's exports). Its error is reported in step 9,
	// after the checks that come before it.
	Prepare(ctx context.Context, env *Env, rec *store.Resource, privateInputs []byte) error
	// CheckUpdate is admission step 5: what an update may not change.
	CheckUpdate(cur store.Resource, spec, privateInputs []byte) error
	// Admit is admission step 9, the Form's own rules, checked against
	// the space under its lock. rec is the record as it would be; update
	// is false for a create.
	Admit(ctx context.Context, sp *Space, rec store.Resource, update bool) error
	// Apply causes an Operation's effect outside the store. It must be
	// idempotent given the records: it runs again after a restart and from
	// the reconciler. The returned mutations are journaled with the
	// Operation's outcome.
	Apply(ctx context.Context, env *Env, ch Change) ([]store.Mutation, error)
	// Undo is asked after Apply failed and decides what the failure means
	// (see Failure).
	Undo(ctx context.Context, env *Env, ch Change) Failure
	// Observe computes r's observed document; get reads the resources of
	// r's space the observation depends on. false: the Form observes
	// nothing, or the host cannot confirm a value now (the last
	// observation stays).
	// A Form that observes nothing implements Unobserved, so that its
	// false is not taken for a value to try again.
	Observe(ctx context.Context, env *Env, r store.Resource, get Lookup) (json.RawMessage, bool)
	// Rebuild puts what r needs outside the store back at start (the
	// engine keeps its queues and consumers in memory). pending is the
	// kind of r's unfinished Operation, "" when none: the resumed
	// Operation decides what a create or delete in flight leaves.
	Rebuild(ctx context.Context, env *Env, r store.Resource, pending string) error
}

// Summarizer is optionally implemented by a Form whose specs can be
// large: a list item shows Summary(spec) unless the list asks for the full
// view.
type Summarizer interface {
	Summary(spec json.RawMessage) json.RawMessage
}

// EngineQueue is implemented by a Form whose resources are queues of the
// delivery engine: they take messages (producer Bindings, the publish
// route), are inspected, purged, redriven, paused and resumed, and the
// cluster places them on hosts. QueueConfig is the engine's configuration
// of a stored resource of the Form.
type EngineQueue interface {
	QueueConfig(r store.Resource) (delivery.QueueConfig, error)
}

// EngineConsumer is implemented by a Form whose resources are consumers of
// the delivery engine: they feed a queue's messages to a worker. Their
// delivery state is their queue's, and whoever changes the code they run
// needs editor on the queues they read (admission step 8).
type EngineConsumer interface {
	ConsumerConfig(r store.Resource) (delivery.ConsumerConfig, error)
}

// QueueAuthority is implemented by a Form whose create or update can change
// the code that runs on a queue's messages (admission step 8, the rest of
// the reference rule): it names the queues the change reaches, and the
// principal needs editor on each. prev is the stored record on an update,
// nil on a create. Space.ConsumedQueues lists the queues the consumers of a
// worker read.
type QueueAuthority interface {
	QueueClaims(ctx context.Context, sp *Space, prev *store.Resource, spec []byte) ([]QueueClaim, error)
}

// QueueClaim is one part of a change that reaches queues: the request's
// member that makes it (Pointer), why editor is needed there (Why), and
// the queues.
type QueueClaim struct {
	Pointer string
	Why     string
	Queues  []string
}

// ListedSpec is r's spec as a list item shows it by default: its Form's
// summary (made once per record version: summaryCache), or the spec
// itself.
func (c *Controller) ListedSpec(r store.Resource) json.RawMessage {
	if f, ok := c.forms.Form(r.FormURL); ok {
		if s, ok := f.(Summarizer); ok {
			if r.UID == "" || r.ETag == "" {
				return s.Summary(r.Spec)
			}
			return c.summaries.get(r, func() json.RawMessage { return s.Summary(r.Spec) })
		}
	}
	return r.Spec
}

// Reference is one reference of a spec to another resource of its space.
type Reference struct {
	Pointer string // JSON pointer to the resourceUid member
	UID     string
	FormURL string // the Form the referenced resource must have
}

// Change is an Operation's effect as a Form applies it.
type Change struct {
	Kind  string // KindCreate, KindUpdate or KindDelete
	Space string
	UID   string
	// Record is the record the create or update makes; nil for a delete.
	Record *store.Resource
}

// Failure is what a failed effect means.
type Failure int

const (
	// FailUnknown: the effect may have happened in part; the Operation is
	// reconciling with effect unknown and the reconciler re-drives it.
	FailUnknown Failure = iota
	// FailNothing: the effect is confirmed absent (a create the engine did
	// not take): the Operation failed with no effect.
	FailNothing
	// FailRunning: the effect is under way and not proven either way (a
	// consumer's stop boundary): the Operation stays running, effect
	// unknown, and is re-driven.
	FailRunning
)

// Lookup reads a resource of the observed resource's space by UID.
type Lookup func(uid string) (store.Resource, bool)

// Env is what Forms act on: the engine, the runtime, the version resolver
// and the store (for reads).
type Env struct {
	Engine   Engine
	Workers  Workers
	Versions *Versions
	Store    store.Store
	// Queues observes broker queues (Options.ExternalQueues); nil without
	// brokers.
	Queues ExternalQueues

	// specs caches decoded specs for observation (see observedSpec).
	specs sync.Map // resource UID -> cachedSpec
}

type cachedSpec struct {
	raw []byte
	v   any
}

// observedSpec decodes r's spec as T, reusing the value decoded by the
// last observation of r while its spec bytes are unchanged: an idle host
// observes every resource every interval, and decoding each consumer's spec
// again was most of that cost.
func observedSpec[T any](env *Env, r store.Resource) (T, error) {
	if c, ok := env.specs.Load(r.UID); ok {
		c := c.(cachedSpec)
		if v, ok := c.v.(T); ok && bytes.Equal(c.raw, r.Spec) {
			return v, nil
		}
	}
	v, err := decodeSpec[T](r.Spec)
	if err == nil {
		env.specs.Store(r.UID, cachedSpec{raw: r.Spec, v: v})
	}
	return v, err
}

// Unobserved is implemented by a Form whose resources have no observation
// (observed stays {}): the observer does not ask its Observe.
type Unobserved interface {
	Unobserved() bool
}

// forgetSpec drops uid's cached spec (the resource is gone).
func (e *Env) forgetSpec(uid string) { e.specs.Delete(uid) }

// Registry holds the Forms a host serves, in registration order, which is
// also the order of rebuild at start (a queue before its consumers).
type Registry struct {
	list  []Form
	byURL map[string]Form
}

// NewRegistry is a registry of forms.
func NewRegistry(forms ...Form) *Registry {
	r := &Registry{byURL: map[string]Form{}}
	for _, f := range forms {
		r.Register(f)
	}
	return r
}

// Builtin is the registry of the reference host's Forms: the four
// Takoform Forms and the host's own PullConsumer.
func Builtin() *Registry { return BuiltinWith(QueueForm{}) }

// BuiltinWith is Builtin with q's broker Offerings of AtLeastOnceQueue.
func BuiltinWith(q QueueForm) *Registry {
	return NewRegistry(q, WorkerForm{}, VersionForm{}, ConsumerForm{}, PullConsumerForm{})
}

// Register adds a Form; it panics on a second Form with the same URL (a
// programming error).
func (r *Registry) Register(f Form) {
	if _, dup := r.byURL[f.URL()]; dup {
		panic(fmt.Sprintf("controller: Form %s registered twice", f.URL()))
	}
	r.list = append(r.list, f)
	r.byURL[f.URL()] = f
}

// Form is the Form of url, if served.
func (r *Registry) Form(url string) (Form, bool) {
	f, ok := r.byURL[url]
	return f, ok
}

// Forms lists the registered Forms in registration order.
func (r *Registry) Forms() []Form { return append([]Form(nil), r.list...) }

// IsQueue reports whether url is the URL of a Form whose resources are the
// engine's queues (EngineQueue).
func (r *Registry) IsQueue(url string) bool {
	_, ok := r.byURL[url].(EngineQueue)
	return ok
}

// IsConsumer reports whether url is the URL of a Form whose resources are
// the engine's consumers (EngineConsumer).
func (r *Registry) IsConsumer(url string) bool {
	_, ok := r.byURL[url].(EngineConsumer)
	return ok
}

// Queues lists the URLs of the Forms whose resources are the engine's
// queues, in registration order.
func (r *Registry) Queues() []string {
	var out []string
	for _, f := range r.list {
		if _, ok := f.(EngineQueue); ok {
			out = append(out, f.URL())
		}
	}
	return out
}

// Consumers lists the URLs of the Forms whose resources are the engine's
// consumers, in registration order.
func (r *Registry) Consumers() []string {
	var out []string
	for _, f := range r.list {
		if _, ok := f.(EngineConsumer); ok {
			out = append(out, f.URL())
		}
	}
	return out
}

// QueueConfig is the engine's configuration of r, a stored resource of a
// queue Form; an error when r's Form is not one.
func (r *Registry) QueueConfig(rec store.Resource) (delivery.QueueConfig, error) {
	q, ok := r.byURL[rec.FormURL].(EngineQueue)
	if !ok {
		return delivery.QueueConfig{}, fmt.Errorf("controller: %s is a %s, not a queue of the engine", rec.UID, r.Name(rec.FormURL))
	}
	return q.QueueConfig(rec)
}

// ConsumerConfig is the engine's configuration of r, a stored resource of
// a consumer Form; an error when r's Form is not one.
func (r *Registry) ConsumerConfig(rec store.Resource) (delivery.ConsumerConfig, error) {
	c, ok := r.byURL[rec.FormURL].(EngineConsumer)
	if !ok {
		return delivery.ConsumerConfig{}, fmt.Errorf("controller: %s is a %s, not a consumer of the engine", rec.UID, r.Name(rec.FormURL))
	}
	return c.ConsumerConfig(rec)
}

// DefaultQueue is the URL of the first queue Form, for checks that must
// name one before the queue is read (a permission on a queue that does
// not exist); "" when the registry has none.
func (r *Registry) DefaultQueue() string {
	if qs := r.Queues(); len(qs) > 0 {
		return qs[0]
	}
	return ""
}

// Name is the name of the Form of url, or url itself for a Form the
// registry does not hold.
func (r *Registry) Name(url string) string {
	if f, ok := r.byURL[url]; ok {
		return f.Name()
	}
	return url
}
