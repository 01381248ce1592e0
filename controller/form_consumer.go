package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// ConsumerForm is QueueConsumer 0.3.0: attaches a queue to a worker's queue
// handler in the delivery engine.
type ConsumerForm struct{}

var (
	_ Form           = ConsumerForm{}
	_ EngineConsumer = ConsumerForm{}
	_ QueueAuthority = ConsumerForm{}
)

func (ConsumerForm) URL() string         { return schemas.FormQueueConsumer }
func (ConsumerForm) Name() string        { return "QueueConsumer 0.3.0" }
func (ConsumerForm) Offerings() []string { return []string{OfferingEmbedded} }

func (ConsumerForm) Validate(spec, pi []byte) ([]schemas.Violation, error) {
	return schemas.ValidateResource(schemas.FormQueueConsumer, spec, pi)
}

const (
	ptrConsumerQueue = "/spec/queue/resourceUid"
	ptrConsumerDLQ   = "/spec/deadLetterQueue/resourceUid"
)

func (ConsumerForm) References(spec []byte) ([]Reference, error) {
	sp, err := decodeSpec[api.QueueConsumerSpec](spec)
	if err != nil {
		return nil, err
	}
	out := []Reference{
		{ptrConsumerQueue, sp.Queue.ResourceUid, schemas.FormAtLeastOnceQueue},
		{"/spec/worker/resourceUid", sp.Worker.ResourceUid, schemas.FormModuleWorker},
	}
	if sp.DeadLetterQueue != nil {
		out = append(out, Reference{ptrConsumerDLQ, sp.DeadLetterQueue.ResourceUid, schemas.FormAtLeastOnceQueue})
	}
	return out, nil
}

func (ConsumerForm) Prepare(context.Context, *Env, *store.Resource, []byte) error { return nil }

// CheckUpdate: queue and worker are immutable.
func (ConsumerForm) CheckUpdate(cur store.Resource, spec, _ []byte) error {
	old, err1 := decodeSpec[api.QueueConsumerSpec](cur.Spec)
	nw, err2 := decodeSpec[api.QueueConsumerSpec](spec)
	if err1 != nil || err2 != nil {
		return errors.Join(err1, err2)
	}
	var p *problem.Problem
	if old.Queue.ResourceUid != nw.Queue.ResourceUid { // mutate:queue-immutable
		p = problem.Unprocessable(problem.CodeInvalidSpec, "queue and worker are immutable: delete the consumer and create a new one")
		p.WithPointer("/spec/queue", "queue cannot change")
	}
	if old.Worker.ResourceUid != nw.Worker.ResourceUid {
		if p == nil {
			p = problem.Unprocessable(problem.CodeInvalidSpec, "queue and worker are immutable: delete the consumer and create a new one")
		}
		p.WithPointer("/spec/worker", "worker cannot change")
	}
	if p != nil {
		return p
	}
	return nil
}

// Admit: one consumer per queue, the worker provides queue, no dead-letter
// cycle.
func (ConsumerForm) Admit(ctx context.Context, sp *Space, rec store.Resource, _ bool) error { // mutate:dlq-cycle-2-update-1
	spec, err := decodeSpec[api.QueueConsumerSpec](rec.Spec)
	if err != nil {
		return err
	}
	q := spec.Queue.ResourceUid
	users, err := sp.ReferencedBy(ctx, q)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.Resource.FormURL == schemas.FormQueueConsumer && u.Via(ptrConsumerQueue) { // mutate:second-consumer
			return problem.Conflict(problem.CodeConsumerConflict, "the queue already has a consumer (%s); a queue has at most one", u.Resource.UID).
				WithPointer(ptrConsumerQueue, "this queue already has a QueueConsumer")
		}
		if u.Resource.FormURL == schemas.FormPullConsumer && u.Via(ptrConsumerQueue) {
			// One consumer of either kind (spec/peers.md §Pull consumers).
			return problem.Conflict(problem.CodeConsumerConflict, "the queue is consumed over HTTP by the PullConsumer %s; a queue has at most one consumer, of either kind", u.Resource.UID).
				WithPointer(ptrConsumerQueue, "this queue already has a PullConsumer")
		}
	}
	if err := workerProvidesQueue(ctx, sp, spec.Worker.ResourceUid, "/spec/worker/resourceUid"); err != nil {
		return err
	}
	if spec.DeadLetterQueue != nil {
		return noDeadLetterCycle(ctx, sp, q, spec.DeadLetterQueue.ResourceUid) // mutate:dlq-cycle-2-update-2
	}
	return nil
}

// noDeadLetterCycle refuses a consumer of q (of either kind) whose
// dead-letter queue dlq would lead back to q.
func noDeadLetterCycle(ctx context.Context, sp *Space, q, dlq string) error {
	path, err := deadLetterCycle(ctx, sp, q, dlq)
	if err != nil {
		return err
	}
	if path != nil {
		return problem.Unprocessable(problem.CodeDeadLetterCycle, "the dead-letter queues would form a cycle: %s", strings.Join(path, " -> ")).
			WithPointer(ptrConsumerDLQ, "dead-lettering into this queue leads back to the consumer's own queue")
	}
	return nil
}

// deadLetterCycle returns a path q -> dlq -> ... -> q through the
// dead-letter queues of the space's consumers, or nil. It follows only the
// consumers of the queues on the way.
func deadLetterCycle(ctx context.Context, sp *Space, q, dlq string) ([]string, error) {
	next := func(n string) ([]string, error) {
		if n == q {
			return []string{dlq}, nil
		}
		users, err := sp.ReferencedBy(ctx, n)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, u := range users {
			if !isConsumerForm(u.Resource.FormURL) || !u.Via(ptrConsumerQueue) {
				continue
			}
			if _, dlq, err := consumerQueues(u.Resource.FormURL, u.Resource.Spec); err == nil && dlq != "" {
				out = append(out, dlq)
			}
		}
		return out, nil
	}
	seen := map[string]bool{}
	var path []string
	var walk func(n string) (bool, error)
	walk = func(n string) (bool, error) {
		nexts, err := next(n)
		if err != nil {
			return false, err
		}
		for _, m := range nexts {
			if m == q {
				path = append(path, m)
				return true, nil
			}
			if seen[m] {
				continue
			}
			seen[m] = true
			path = append(path, m)
			if ok, err := walk(m); ok || err != nil {
				return ok, err
			}
			path = path[:len(path)-1]
		}
		return false, nil
	}
	ok, err := walk(q) // mutate:dlq-cycle-long
	if err != nil || !ok {
		return nil, err
	}
	return append([]string{q}, path...), nil
}

// workerProvidesQueue: the worker declares queue and its selected version
// exports it.
func workerProvidesQueue(ctx context.Context, sp *Space, workerUID, pointer string) error {
	w, _, err := sp.Get(ctx, workerUID)
	if err != nil {
		return err
	}
	wsp, err := decodeSpec[api.ModuleWorkerSpec](w.Spec)
	if err != nil {
		return err
	}
	if !slices.Contains(handlersOf(wsp), "queue") {
		return problem.Unprocessable(problem.CodeMissingHandler, "the worker does not declare the queue handler").WithPointer(pointer, `the ModuleWorker's handlers must include "queue"`)
	}
	if wsp.Version == nil {
		return problem.Unprocessable(problem.CodeMissingHandler, "the worker selects no WorkerVersion, so nothing provides the queue handler").WithPointer(pointer, "the ModuleWorker has no selected version")
	}
	v, ok, err := sp.Get(ctx, wsp.Version.ResourceUid)
	if err != nil {
		return err
	}
	if !ok || !slices.Contains(v.Exports, "queue") {
		return problem.Unprocessable(problem.CodeMissingHandler, "the worker's selected version does not export queue").WithPointer(pointer, "the selected WorkerVersion does not export queue")
	}
	return nil
}

// Apply attaches, updates or detaches the engine's consumer.
func (ConsumerForm) Apply(ctx context.Context, env *Env, ch Change) ([]store.Mutation, error) {
	return nil, applyConsumer(ctx, env, ch, consumerConfigOf)
}

// applyConsumer is the effect of a consumer of either kind: attach,
// update or detach the engine's consumer, idempotently.
func applyConsumer(ctx context.Context, env *Env, ch Change, configOf func(store.Resource) (delivery.ConsumerConfig, error)) error {
	if ch.Kind == KindDelete {
		return env.Engine.Detach(ctx, ch.UID)
	}
	cfg, err := configOf(*ch.Record)
	if err != nil {
		return err
	}
	attached, err := env.Engine.ConsumerAttached(ctx, ch.UID)
	if err != nil {
		return err
	}
	if attached {
		if ch.Kind == KindCreate {
			return nil
		}
		return env.Engine.UpdateConsumer(ctx, cfg)
	}
	return env.Engine.Attach(ctx, cfg)
}

// Undo: a create the engine holds no consumer for changed nothing; a
// delete whose stop boundary is not proven stays running.
func (ConsumerForm) Undo(ctx context.Context, env *Env, ch Change) Failure {
	switch ch.Kind {
	case KindCreate:
		if env.Engine.Detach(ctx, ch.UID) == nil {
			return FailNothing
		}
	case KindDelete:
		return FailRunning
	}
	return FailUnknown
}

func usable(r store.Resource, ok bool, form string) bool {
	return ok && r.FormURL == form && r.State != store.StateDeleting
}

// Observe: whether its queue and worker exist and whether the engine has
// the consumer attached.
func (ConsumerForm) Observe(ctx context.Context, env *Env, r store.Resource, get Lookup) (json.RawMessage, bool) {
	spec, err := observedSpec[api.QueueConsumerSpec](env, r)
	if err != nil {
		return nil, false
	}
	q, qok := get(spec.Queue.ResourceUid)
	w, wok := get(spec.Worker.ResourceUid)
	qe, we := usable(q, qok, schemas.FormAtLeastOnceQueue), usable(w, wok, schemas.FormModuleWorker)
	v := api.QueueConsumerObserved{QueueExists: &qe, WorkerExists: &we}
	if att, err := env.Engine.ConsumerAttached(ctx, r.UID); err == nil {
		v.ConsumerAttached = &att
	}
	b, _ := json.Marshal(v)
	return b, true
}

// Rebuild attaches every stored consumer that is not being created or
// deleted (the resumed Operation decides those).
func (ConsumerForm) Rebuild(ctx context.Context, env *Env, r store.Resource, pending string) error {
	return rebuildConsumer(ctx, env, r, pending, consumerConfigOf)
}

// rebuildConsumer attaches a stored consumer of either kind at start.
func rebuildConsumer(ctx context.Context, env *Env, r store.Resource, pending string, configOf func(store.Resource) (delivery.ConsumerConfig, error)) error {
	if r.State == store.StateCreating || r.State == store.StateDeleting || pending == KindCreate || pending == KindDelete {
		return nil
	}
	cfg, err := configOf(r)
	if err != nil {
		return err
	}
	return env.Engine.Attach(ctx, cfg)
}

// ConsumerConfig: a QueueConsumer is a consumer of the engine
// (EngineConsumer).
func (ConsumerForm) ConsumerConfig(r store.Resource) (delivery.ConsumerConfig, error) {
	return consumerConfigOf(r)
}

// QueueClaims: creating a consumer makes its worker read and settle the
// queue; giving it another dead-letter queue makes it move messages there.
func (ConsumerForm) QueueClaims(_ context.Context, _ *Space, prev *store.Resource, spec []byte) ([]QueueClaim, error) {
	cs, err := decodeSpec[api.QueueConsumerSpec](spec)
	if err != nil {
		return nil, err
	}
	var out []QueueClaim
	if prev == nil {
		out = append(out, QueueClaim{ptrConsumerQueue, "the consumer's worker would read and settle this queue's messages: editor on the queue is required", []string{cs.Queue.ResourceUid}})
	}
	oldDLQ := ""
	if prev != nil {
		if ps, err := decodeSpec[api.QueueConsumerSpec](prev.Spec); err == nil && ps.DeadLetterQueue != nil {
			oldDLQ = ps.DeadLetterQueue.ResourceUid
		}
	}
	if cs.DeadLetterQueue != nil && cs.DeadLetterQueue.ResourceUid != oldDLQ {
		out = append(out, QueueClaim{ptrConsumerDLQ, "the consumer would move messages into this queue: editor on the queue is required", []string{cs.DeadLetterQueue.ResourceUid}})
	}
	return out, nil
}

func consumerConfigOf(r store.Resource) (delivery.ConsumerConfig, error) {
	sp, err := decodeSpec[api.QueueConsumerSpec](r.Spec)
	if err != nil {
		return delivery.ConsumerConfig{}, err
	}
	c := delivery.ConsumerConfig{
		UID: r.UID, Name: r.Name, QueueUID: sp.Queue.ResourceUid, WorkerUID: sp.Worker.ResourceUid,
		MaxBatchSize: sp.MaxBatchSize, MaxBatchTimeoutSeconds: sp.MaxBatchTimeoutSeconds,
		MaxConcurrency: sp.MaxConcurrency, MaxRetries: sp.MaxRetries, RetryDelaySeconds: sp.RetryDelaySeconds,
	}
	if sp.DeadLetterQueue != nil {
		c.DeadLetterQueueUID = sp.DeadLetterQueue.ResourceUid
	}
	return c, nil
}
