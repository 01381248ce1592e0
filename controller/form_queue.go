package controller

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// QueueForm is AtLeastOnceQueue 0.2.0: a queue of the delivery engine.
type QueueForm struct {
	// Brokers are the host's broker Offerings (runtime/broker,
	// spec/peers.md §Brokers): a queue created with one keeps its
	// messages on that broker.
	Brokers []string
	// Default is the Offering of a create that names none; embedded
	// when empty.
	Default string
}

var (
	_ Form        = QueueForm{}
	_ EngineQueue = QueueForm{}
)

func (QueueForm) URL() string  { return schemas.FormAtLeastOnceQueue }
func (QueueForm) Name() string { return "AtLeastOnceQueue 0.2.0" }

// Offerings: the default first (what a create that names none gets).
func (f QueueForm) Offerings() []string {
	all := append([]string{OfferingEmbedded, OfferingSerialized}, f.Brokers...)
	if f.Default == "" {
		return all
	}
	out := []string{f.Default}
	for _, o := range all {
		if o != f.Default {
			out = append(out, o)
		}
	}
	return out
}

// ExternalQueues observes the queues whose messages live on a broker
// (runtime/broker.Store implements it): observed.queueExists and
// messageCount come from the broker. ok is false for another queue.
type ExternalQueues interface {
	Observe(ctx context.Context, uid string) (exists bool, count int, ok bool, err error)
}

func (QueueForm) Validate(spec, pi []byte) ([]schemas.Violation, error) {
	return schemas.ValidateResource(schemas.FormAtLeastOnceQueue, spec, pi)
}

func (QueueForm) References([]byte) ([]Reference, error) { return nil, nil }

func (QueueForm) Prepare(context.Context, *Env, *store.Resource, []byte) error { return nil }

func (QueueForm) CheckUpdate(store.Resource, []byte, []byte) error { return nil }

func (QueueForm) Admit(context.Context, *Space, store.Resource, bool) error { return nil }

// Apply adds, updates or removes the engine's queue. A create finds the
// queue there when rebuild already added it.
func (QueueForm) Apply(ctx context.Context, env *Env, ch Change) ([]store.Mutation, error) {
	switch ch.Kind {
	case KindCreate, KindUpdate:
		cfg, err := queueConfigOf(*ch.Record)
		if err != nil {
			return nil, err
		}
		if _, err := env.Engine.QueueStats(ctx, ch.UID); errors.Is(err, abi.ErrUnknownQueue) {
			return nil, env.Engine.AddQueue(ctx, cfg)
		}
		if ch.Kind == KindCreate {
			return nil, nil
		}
		return nil, env.Engine.UpdateQueue(ctx, cfg)
	case KindDelete:
		if err := env.Engine.RemoveQueue(ctx, ch.UID); err != nil && !errors.Is(err, abi.ErrUnknownQueue) {
			return nil, err
		}
		return []store.Mutation{store.DropQueue{Queue: ch.UID}}, nil
	}
	return nil, nil
}

// Undo: a create whose queue the engine does not hold changed nothing.
func (QueueForm) Undo(ctx context.Context, env *Env, ch Change) Failure {
	if ch.Kind == KindCreate {
		if _, err := env.Engine.QueueStats(ctx, ch.UID); errors.Is(err, abi.ErrUnknownQueue) {
			return FailNothing
		}
	}
	return FailUnknown
}

// Observe: whether the engine holds the queue, and its message count.
func (QueueForm) Observe(ctx context.Context, env *Env, r store.Resource, _ Lookup) (json.RawMessage, bool) {
	if env.Queues != nil && isBroker(r.Offering) {
		exists, n, ok, err := env.Queues.Observe(ctx, r.UID)
		if ok {
			if err != nil {
				return nil, false
			}
			return queueObserved(exists, n), true
		}
	}
	n, err := env.Engine.QueueStats(ctx, r.UID)
	exists := err == nil
	if err != nil && !errors.Is(err, abi.ErrUnknownQueue) {
		return nil, false
	}
	return queueObserved(exists, n), true
}

func queueObserved(exists bool, n int) json.RawMessage {
	v := api.AtLeastOnceQueueObserved{QueueExists: &exists}
	if exists {
		v.MessageCount = &n
	}
	b, _ := json.Marshal(v)
	return b
}

// Rebuild adds every stored queue, in flight or not: a resumed create
// finds it there, a resumed delete removes it.
func (QueueForm) Rebuild(ctx context.Context, env *Env, r store.Resource, _ string) error {
	cfg, err := queueConfigOf(r)
	if err != nil {
		return err
	}
	return env.Engine.AddQueue(ctx, cfg)
}

// QueueConfig: an AtLeastOnceQueue is a queue of the engine (EngineQueue).
func (QueueForm) QueueConfig(r store.Resource) (delivery.QueueConfig, error) { return queueConfigOf(r) }

func queueConfigOf(r store.Resource) (delivery.QueueConfig, error) {
	sp, err := decodeSpec[api.AtLeastOnceQueueSpec](r.Spec)
	if err != nil {
		return delivery.QueueConfig{}, err
	}
	c := delivery.QueueConfig{UID: r.UID, Name: r.Name, MessageRetentionSeconds: sp.MessageRetentionSeconds, Paused: r.Paused,
		Serialized: r.Offering == OfferingSerialized, External: isBroker(r.Offering)}
	if sp.DeliveryDelaySeconds != nil {
		c.DeliveryDelaySeconds = *sp.DeliveryDelaySeconds
	}
	return c, nil
}

// isBroker: an Offering of AtLeastOnceQueue other than the engine's own
// is a broker's (admission accepts only the Offerings the Form lists).
func isBroker(offering string) bool {
	return offering != "" && offering != OfferingEmbedded && offering != OfferingSerialized
}
