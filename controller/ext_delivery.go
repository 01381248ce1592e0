package controller

import (
	"context"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

// DeliveryState is the host extension "active / inactive delivery" of an
// AtLeastOnceQueue (intra-mart's 有効状態 / 無効状態, Cloudflare Queues'
// pause and resume delivery; spec/peers.md). It lives in the queue's record
// (store.Resource.Paused), beside the spec the Form closes, so it survives
// a restart and every update of the spec.
type DeliveryState struct {
	// QueueUID is the queue the state is of (the consumer's queue when
	// read through a consumer).
	QueueUID string
	Active   bool
}

// Delivery reads the delivery state of a queue, or of the queue a consumer
// consumes; p must be able to read the resource it names.
func (c *Controller) Delivery(ctx context.Context, p *auth.Principal, space, uid string) (DeliveryState, error) {
	r, err := c.Resource(ctx, p, space, uid)
	if err != nil {
		return DeliveryState{}, err
	}
	if c.forms.IsQueue(r.FormURL) {
		return DeliveryState{QueueUID: r.UID, Active: !r.Paused}, nil
	}
	if c.forms.IsConsumer(r.FormURL) {
		cfg, err := c.forms.ConsumerConfig(r)
		if err != nil {
			return DeliveryState{}, err
		}
		q, err := c.st.Resource(ctx, cfg.QueueUID)
		if err != nil {
			if isNotFound(err) {
				return DeliveryState{}, problem.NotFound("the consumer's queue %s does not exist", cfg.QueueUID)
			}
			return DeliveryState{}, problem.Unavailable(err)
		}
		return DeliveryState{QueueUID: q.UID, Active: !q.Paused}, nil
	}
	return DeliveryState{}, notAQueue(c.forms.Name(r.FormURL))
}

// SetDelivery makes a queue's delivery active or inactive. Inactive: the
// queue keeps accepting sends and removing expired messages, but no batch
// starts; batches already running finish and settle. The state is durable
// before the engine applies it, and setting the state the queue already has
// changes nothing. p must be able to write AtLeastOnceQueue resources.
func (c *Controller) SetDelivery(ctx context.Context, p *auth.Principal, space, uid string, active bool) (DeliveryState, error) {
	r, err := c.load(ctx, space, uid)
	if err != nil {
		return DeliveryState{}, err
	}
	if !c.forms.IsQueue(r.FormURL) {
		if !p.Can(space, r.FormURL, auth.Read) {
			return DeliveryState{}, problem.Forbidden("the principal may not read %s resources in this space", c.forms.Name(r.FormURL))
		}
		if c.forms.IsConsumer(r.FormURL) {
			return DeliveryState{}, problem.Conflict(problem.CodeNotAQueue, "delivery is paused and resumed on the consumer's queue, not on the consumer")
		}
		return DeliveryState{}, notAQueue(c.forms.Name(r.FormURL))
	}
	if !p.Can(space, r.FormURL, auth.Write) {
		return DeliveryState{}, problem.Forbidden("the principal may not change AtLeastOnceQueue resources in this space")
	}
	unlock := c.spaces.lock(space)
	defer unlock()
	if r, err = c.load(ctx, space, uid); err != nil {
		return DeliveryState{}, err
	}
	if r.Paused == !active {
		return DeliveryState{QueueUID: uid, Active: active}, nil
	}
	// An unfinished Operation holds the record it will write: changing
	// the state under it would be undone by its outcome.
	if fl, busy := c.unresolved(ctx, uid); busy {
		return DeliveryState{}, problem.Conflict(problem.CodeOperationInProgress, "Operation %s on this queue has not finished", fl.id)
	}
	if r.State != store.StateActive {
		return DeliveryState{}, problem.Conflict(problem.CodeOperationInProgress, "the queue is %s; its delivery state can change once it is active", r.State)
	}
	r.Paused = !active
	if err := c.st.Apply(ctx, store.PutResource{Resource: r}); err != nil {
		return DeliveryState{}, problem.Unavailable(err)
	}
	cfg, err := c.forms.QueueConfig(r)
	if err != nil {
		return DeliveryState{}, err
	}
	if err := c.env.Engine.UpdateQueue(ctx, cfg); err != nil {
		// Recorded: the engine takes it from the record at the next
		// start.
		return DeliveryState{}, problem.Unavailable(err)
	}
	c.log.Info("queue delivery changed", "queue", uid, "active", active, "principal", p.Name)
	return DeliveryState{QueueUID: uid, Active: active}, nil
}

func notAQueue(form string) error {
	return problem.New(404, problem.CodeNotAQueue, "a %s has no delivery state: only an AtLeastOnceQueue and a QueueConsumer do", form)
}
