package controller

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// The pull consumer extension (spec/peers.md §Pull consumers): the lease
// routes of a PullConsumer. Like publish, they are not Operations: a lease
// and a settlement are durable when they answer and leave nothing in the
// Operation list.

// Puller leases and settles the messages of a pull consumer's queue: the
// delivery engine's (*delivery.Engine is one).
type Puller interface {
	Lease(ctx context.Context, consumerUID string, max int, visibility, wait time.Duration) (delivery.PullLease, error)
	SettleLease(ctx context.Context, consumerUID, leaseID string, acks []string, retries []delivery.PullRetry) error
	ExtendLease(ctx context.Context, consumerUID, leaseID string, visibility time.Duration) (int64, error)
}

// PullRequest is one lease request; zero values take the consumer's
// settings (MaxMessages: maxBatchSize; Visibility: visibilityTimeoutSeconds).
type PullRequest struct {
	Principal   *auth.Principal
	Space, UID  string
	MaxMessages int
	Visibility  time.Duration
	Wait        time.Duration
}

// pullConsumer loads the PullConsumer a lease route names and checks that
// p may consume its queue. The grant is checked after the UID is looked
// up (a consumer grant names queues, and only the record says which queue
// this consumer reads), but an unknown UID and a refused one answer alike
// to a principal that holds no grant able to consume in the space.
func (c *Controller) pullConsumer(ctx context.Context, p *auth.Principal, space, uid string) (store.Resource, api.PullConsumerSpec, error) {
	var sp api.PullConsumerSpec
	r, err := c.load(ctx, space, uid)
	if err != nil {
		return r, sp, err
	}
	if r.FormURL != schemas.FormPullConsumer {
		if !p.CanAny(space, auth.Read) {
			return r, sp, problem.NotFound("no resource with this UID exists in this space")
		}
		return r, sp, problem.New(http.StatusNotFound, problem.CodeNotAPullConsumer, "a %s has no leases: only a PullConsumer's queue is consumed over HTTP", c.forms.Name(r.FormURL))
	}
	if sp, err = decodeSpec[api.PullConsumerSpec](r.Spec); err != nil {
		return r, sp, problem.Unavailable(err)
	}
	if !p.CanConsume(space, sp.Queue.ResourceUid) {
		return r, sp, problem.Forbidden("the principal may not consume this queue: the lease routes need editor of PullConsumer, or a consumer grant that names the consumer's queue")
	}
	if r.State == store.StateCreating || r.State == store.StateDeleting {
		return r, sp, problem.Conflict(problem.CodeOperationInProgress, "the pull consumer is being %s", map[string]string{store.StateCreating: "created", store.StateDeleting: "deleted"}[r.State])
	}
	if c.opts.Puller == nil {
		return r, sp, problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable, "this host has no puller for pull consumers")
	}
	return r, sp, nil
}

// Pull leases messages of the pull consumer's queue (spec/peers.md §Pull
// consumers). An empty lease (no ID) means nothing became visible in time.
func (c *Controller) Pull(ctx context.Context, req PullRequest) (delivery.PullLease, error) {
	_, sp, err := c.pullConsumer(ctx, req.Principal, req.Space, req.UID)
	if err != nil {
		return delivery.PullLease{}, err
	}
	max := req.MaxMessages
	if max == 0 {
		max = sp.MaxBatchSize
	}
	if max > sp.MaxBatchSize {
		return delivery.PullLease{}, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "maxMessages %d is more than the pull consumer's maxBatchSize %d", max, sp.MaxBatchSize).
			WithPointer("/maxMessages", "at most the consumer's maxBatchSize")
	}
	vis := req.Visibility
	if vis == 0 {
		vis = time.Duration(sp.VisibilityTimeoutSeconds) * time.Second
	}
	l, err := c.opts.Puller.Lease(ctx, req.UID, max, vis, req.Wait)
	if err != nil {
		return delivery.PullLease{}, pullProblem(err)
	}
	return l, nil
}

// SettleLease settles messages of a lease in one durable write.
func (c *Controller) SettleLease(ctx context.Context, p *auth.Principal, space, uid, leaseID string, acks []string, retries []delivery.PullRetry) error {
	if _, _, err := c.pullConsumer(ctx, p, space, uid); err != nil {
		return err
	}
	if err := c.opts.Puller.SettleLease(ctx, uid, leaseID, acks, retries); err != nil {
		return pullProblem(err)
	}
	return nil
}

// ExtendLease hides a lease's unsettled messages for visibility more from
// now and returns the new expiry (UTC epoch ms).
func (c *Controller) ExtendLease(ctx context.Context, p *auth.Principal, space, uid, leaseID string, visibility time.Duration) (int64, error) {
	if _, _, err := c.pullConsumer(ctx, p, space, uid); err != nil {
		return 0, err
	}
	exp, err := c.opts.Puller.ExtendLease(ctx, uid, leaseID, visibility)
	if err != nil {
		return 0, pullProblem(err)
	}
	return exp, nil
}

// pullProblem is the problem of a failed lease call.
func pullProblem(err error) error {
	if p := (*problem.Problem)(nil); errors.As(err, &p) {
		// The answer of the queue's owner, to which another host of a
		// cluster forwarded the call.
		return p
	}
	switch {
	case errors.Is(err, delivery.ErrUnknownLease):
		return problem.New(http.StatusNotFound, problem.CodeUnknownLease, "this pull consumer issued no lease of this ID (or it ended long ago)")
	case errors.Is(err, delivery.ErrLeaseExpired):
		return problem.Conflict(problem.CodeLeaseExpired, "the lease expired: its unsettled messages are visible again, and a new lease delivers them with their attempts counted")
	case errors.Is(err, delivery.ErrLeaseSettled):
		return problem.Conflict(problem.CodeLeaseSettled, "every message of this lease is settled already")
	case errors.Is(err, delivery.ErrLeaseOfOtherConsumer):
		return problem.Conflict(problem.CodeWrongConsumer, "the lease was issued to another pull consumer: settle it through that one")
	case errors.Is(err, abi.ErrUnknownMessage):
		return problem.Conflict(problem.CodeUnknownMessage, "%s is not a message of this lease; nothing was settled", errDetail(err))
	case errors.Is(err, abi.ErrAlreadySettled):
		return problem.Conflict(problem.CodeAlreadySettled, "%s was settled already; nothing was settled", errDetail(err))
	case errors.Is(err, delivery.ErrDuplicateMessage):
		return problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the settlement names %s twice; nothing was settled", errDetail(err))
	case errors.Is(err, abi.ErrInvalidDelay):
		return problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "delaySeconds must be an integer from 0 to %d; nothing was settled", abi.MaxDelaySeconds)
	case errors.Is(err, delivery.ErrInvalidConfig):
		return problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "maxMessages must be 1 to %d and visibilityTimeoutSeconds 1 to %d", delivery.MaxPullMessages, delivery.MaxVisibilitySeconds)
	case errors.Is(err, delivery.ErrUnknownConsumer), errors.Is(err, delivery.ErrNotPullConsumer):
		return problem.Conflict(problem.CodeOperationInProgress, "the engine does not hold the pull consumer yet (or any more): its create or delete has not finished")
	}
	return problem.Unavailable(err)
}

// errDetail is the message ID an engine error carries after its sentence
// ("...: <id>").
func errDetail(err error) string {
	s := err.Error()
	for i := len(s) - 1; i > 0; i-- {
		if s[i] == ' ' && s[i-1] == ':' {
			return "message " + s[i+1:]
		}
	}
	return "a message"
}
