package controller

import (
	"context"
	"encoding/json"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// PullConsumerForm is the host's Form PullConsumer 0.1.0 (spec/peers.md
// §Pull consumers): the queue is consumed over HTTP by applications that
// lease its messages (ext_pull.go), with a QueueConsumer's settings minus
// the worker. It is a consumer for the Forms' one-consumer rule: a queue
// has a QueueConsumer or a PullConsumer, never both, nor two of either.
type PullConsumerForm struct{}

var _ Form = PullConsumerForm{}

func (PullConsumerForm) URL() string         { return schemas.FormPullConsumer }
func (PullConsumerForm) Name() string        { return "PullConsumer 0.1.0" }
func (PullConsumerForm) Offerings() []string { return []string{OfferingEmbedded} }

func (PullConsumerForm) Validate(spec, pi []byte) ([]schemas.Violation, error) {
	return schemas.ValidateResource(schemas.FormPullConsumer, spec, pi)
}

func (PullConsumerForm) References(spec []byte) ([]Reference, error) {
	sp, err := decodeSpec[api.PullConsumerSpec](spec)
	if err != nil {
		return nil, err
	}
	out := []Reference{{ptrConsumerQueue, sp.Queue.ResourceUid, schemas.FormAtLeastOnceQueue}}
	if sp.DeadLetterQueue != nil {
		out = append(out, Reference{ptrConsumerDLQ, sp.DeadLetterQueue.ResourceUid, schemas.FormAtLeastOnceQueue})
	}
	return out, nil
}

func (PullConsumerForm) Prepare(context.Context, *Env, *store.Resource, []byte) error { return nil }

// CheckUpdate: the queue is immutable.
func (PullConsumerForm) CheckUpdate(cur store.Resource, spec, _ []byte) error {
	old, err1 := decodeSpec[api.PullConsumerSpec](cur.Spec)
	nw, err2 := decodeSpec[api.PullConsumerSpec](spec)
	if err1 != nil || err2 != nil {
		return problem.Unprocessable(problem.CodeInvalidSpec, "the spec does not decode")
	}
	if old.Queue.ResourceUid != nw.Queue.ResourceUid {
		return problem.Unprocessable(problem.CodeInvalidSpec, "queue is immutable: delete the pull consumer and create a new one").
			WithPointer("/spec/queue", "queue cannot change")
	}
	return nil
}

// Admit: one consumer of either kind per queue, no dead-letter cycle, and
// no serialized queue (its one-batch-at-a-time order is a QueueConsumer's).
func (PullConsumerForm) Admit(ctx context.Context, sp *Space, rec store.Resource, _ bool) error {
	spec, err := decodeSpec[api.PullConsumerSpec](rec.Spec)
	if err != nil {
		return err
	}
	q := spec.Queue.ResourceUid
	if err := oneConsumer(ctx, sp, q); err != nil {
		return err
	}
	if qr, ok, err := sp.Get(ctx, q); err != nil {
		return err
	} else if ok && qr.Offering == OfferingSerialized {
		return problem.Unprocessable(problem.CodeInvalidSpec, "a serialized queue is delivered one batch at a time in accept order, which a pull consumer does not do; give it a QueueConsumer").
			WithPointer(ptrConsumerQueue, "this queue is serialized")
	}
	if spec.DeadLetterQueue != nil {
		return noDeadLetterCycle(ctx, sp, q, spec.DeadLetterQueue.ResourceUid)
	}
	return nil
}

// oneConsumer is the Forms' one-consumer rule over both consumer kinds:
// the queue must have no QueueConsumer and no PullConsumer (the one being
// admitted is not in the space yet, or is the record being updated, whose
// queue does not change).
func oneConsumer(ctx context.Context, sp *Space, queue string) error {
	users, err := sp.ReferencedBy(ctx, queue)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.Resource.UID == sp.Self() || !isConsumerForm(u.Resource.FormURL) || !u.Via(ptrConsumerQueue) {
			continue
		}
		kind := "QueueConsumer"
		if u.Resource.FormURL == schemas.FormPullConsumer {
			kind = "PullConsumer"
		}
		return problem.Conflict(problem.CodeConsumerConflict, "the queue already has a consumer (%s %s); a queue has at most one, of either kind", kind, u.Resource.UID).
			WithPointer(ptrConsumerQueue, "this queue already has a "+kind)
	}
	return nil
}

// isConsumerForm: a QueueConsumer or a PullConsumer, the two consumers of
// a queue.
func isConsumerForm(url string) bool {
	return url == schemas.FormQueueConsumer || url == schemas.FormPullConsumer
}

// consumerQueues are the queue and dead-letter queue ("" when none) of a
// QueueConsumer's or PullConsumer's spec.
func consumerQueues(formURL string, spec []byte) (queue, dlq string, err error) {
	var sp struct {
		Queue           api.Reference  `json:"queue"`
		DeadLetterQueue *api.Reference `json:"deadLetterQueue"`
	}
	if err := json.Unmarshal(spec, &sp); err != nil {
		return "", "", err
	}
	if sp.DeadLetterQueue != nil {
		dlq = sp.DeadLetterQueue.ResourceUid
	}
	return sp.Queue.ResourceUid, dlq, nil
}

// Apply attaches, updates or detaches the engine's pull consumer: the
// QueueConsumer's effect.
func (PullConsumerForm) Apply(ctx context.Context, env *Env, ch Change) ([]store.Mutation, error) {
	return nil, applyConsumer(ctx, env, ch, pullConfigOf)
}

func (PullConsumerForm) Undo(ctx context.Context, env *Env, ch Change) Failure {
	return ConsumerForm{}.Undo(ctx, env, ch)
}

// Observe: whether its queue exists and whether the engine holds it.
func (PullConsumerForm) Observe(ctx context.Context, env *Env, r store.Resource, get Lookup) (json.RawMessage, bool) {
	spec, err := observedSpec[api.PullConsumerSpec](env, r)
	if err != nil {
		return nil, false
	}
	q, qok := get(spec.Queue.ResourceUid)
	qe := usable(q, qok, schemas.FormAtLeastOnceQueue)
	v := api.PullConsumerObserved{QueueExists: &qe}
	if att, err := env.Engine.ConsumerAttached(ctx, r.UID); err == nil {
		v.ConsumerAttached = &att
	}
	b, _ := json.Marshal(v)
	return b, true
}

func (PullConsumerForm) Rebuild(ctx context.Context, env *Env, r store.Resource, pending string) error {
	return rebuildConsumer(ctx, env, r, pending, pullConfigOf)
}

// PullConfigOf is the engine's configuration of a stored PullConsumer
// (for the hosts of a cluster, as ConsumerConfigOf).
func PullConfigOf(r store.Resource) (delivery.ConsumerConfig, error) { return pullConfigOf(r) }

func pullConfigOf(r store.Resource) (delivery.ConsumerConfig, error) {
	sp, err := decodeSpec[api.PullConsumerSpec](r.Spec)
	if err != nil {
		return delivery.ConsumerConfig{}, err
	}
	c := delivery.ConsumerConfig{
		UID: r.UID, Name: r.Name, QueueUID: sp.Queue.ResourceUid, Pull: true,
		MaxBatchSize: sp.MaxBatchSize, MaxConcurrency: 1,
		MaxRetries: sp.MaxRetries, RetryDelaySeconds: sp.RetryDelaySeconds,
	}
	if sp.DeadLetterQueue != nil {
		c.DeadLetterQueueUID = sp.DeadLetterQueue.ResourceUid
	}
	return c, nil
}

// ConsumerConfig: a pull consumer is a consumer of the engine
// (EngineConsumer), one whose batches are leased over HTTP.
func (PullConsumerForm) ConsumerConfig(r store.Resource) (delivery.ConsumerConfig, error) {
	return pullConfigOf(r)
}

// QueueClaims: whoever creates a pull consumer lets its consumer grants
// read and settle the queue's messages (spec/peers.md §Pull consumers);
// giving it another dead-letter queue makes it move messages there.
func (PullConsumerForm) QueueClaims(_ context.Context, _ *Space, prev *store.Resource, spec []byte) ([]QueueClaim, error) {
	q, dlq, err := consumerQueues(schemas.FormPullConsumer, spec)
	if err != nil {
		return nil, err
	}
	var out []QueueClaim
	if prev == nil {
		out = append(out, QueueClaim{ptrConsumerQueue, "the pull consumer's applications would read and settle this queue's messages: editor on the queue is required", []string{q}})
	}
	oldDLQ := ""
	if prev != nil {
		_, oldDLQ, _ = consumerQueues(schemas.FormPullConsumer, prev.Spec)
	}
	if dlq != "" && dlq != oldDLQ {
		out = append(out, QueueClaim{ptrConsumerDLQ, "the pull consumer would move messages into this queue: editor on the queue is required", []string{dlq}})
	}
	return out, nil
}
