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
type QueueForm struct{}

var _ Form = QueueForm{}

func (QueueForm) URL() string         { return schemas.FormAtLeastOnceQueue }
func (QueueForm) Name() string        { return "AtLeastOnceQueue 0.2.0" }
func (QueueForm) Offerings() []string { return []string{OfferingEmbedded, OfferingSerialized} }

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
	n, err := env.Engine.QueueStats(ctx, r.UID)
	exists := err == nil
	if err != nil && !errors.Is(err, abi.ErrUnknownQueue) {
		return nil, false
	}
	v := api.AtLeastOnceQueueObserved{QueueExists: &exists}
	if exists {
		v.MessageCount = &n
	}
	b, _ := json.Marshal(v)
	return b, true
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

func queueConfigOf(r store.Resource) (delivery.QueueConfig, error) {
	sp, err := decodeSpec[api.AtLeastOnceQueueSpec](r.Spec)
	if err != nil {
		return delivery.QueueConfig{}, err
	}
	c := delivery.QueueConfig{UID: r.UID, Name: r.Name, MessageRetentionSeconds: sp.MessageRetentionSeconds, Paused: r.Paused,
		Serialized: r.Offering == OfferingSerialized}
	if sp.DeliveryDelaySeconds != nil {
		c.DeliveryDelaySeconds = *sp.DeliveryDelaySeconds
	}
	return c, nil
}
