package controller

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

// The publish extension (spec/peers.md §Publish): messages sent to an
// AtLeastOnceQueue over the Host API, through the send the producer
// Binding goes through (the engine's), with its limits and its codes. It is
// not an Operation: like a Binding send it is done, durably, when it
// answers, and it leaves nothing in the Operation list.

// Sender accepts messages into a queue: the delivery engine's send, the
// one the producer Binding uses (*delivery.Engine is one). extra's
// mutations are written in the same store write as the messages.
type Sender interface {
	SendWith(ctx context.Context, queueUID string, msgs []abi.OutgoingMessage, extra func(ids []string) []store.Mutation) ([]string, error)
}

// PublishRequest is one publish: 1..100 messages, sent atomically.
type PublishRequest struct {
	Principal   *auth.Principal
	Space, UID  string
	Messages    []abi.OutgoingMessage
	Idempotency Idempotency
}

// publishRecord starts the OperationID of the idempotency record of a
// publish, which names no Operation but the message IDs it answered
// (comma-separated; IDs are hex). A store's record expiry removes a record
// whose Operation is gone once it is past the cutoff (24 hours on the
// host), so a publish's key is remembered that long. A space records at
// most Options.MaxPublishKeysPerSpace of them per PublishKeyWindow
// (keyQuota).
const publishRecord = "publish:"

// MaxPublishKeysPerSpace is how many publishes with an Idempotency-Key a
// space records per window of PublishKeyWindow, by default: each record
// is kept that long (with up to 100 message IDs, about 3.3 KB) and held in
// memory by the journal store, so a client sending a new key with every
// publish must not grow it without bound.
const (
	MaxPublishKeysPerSpace = 100000
	PublishKeyWindow       = 24 * time.Hour
)

// keyQuota counts the keyed publishes of each space in hourly buckets over
// the last PublishKeyWindow (the process's own: it starts from 0 when the
// host does, so across restarts a space may hold more records than the
// bound, by one bound per restart within the window).
type keyQuota struct {
	mu sync.Mutex
	m  map[string]*[24]quotaBucket
}

type quotaBucket struct {
	hour int64 // Unix hour the count is of
	n    int
}

// take counts one keyed publish of space at now, unless max are counted in
// the window already.
func (q *keyQuota) take(space string, now time.Time, max int) bool {
	hour := now.Unix() / 3600
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string]*[24]quotaBucket{}
	}
	bs := q.m[space]
	if bs == nil {
		bs = &[24]quotaBucket{}
		q.m[space] = bs
	}
	sum := 0
	for _, b := range bs {
		if b.hour > hour-24 {
			sum += b.n
		}
	}
	if sum >= max {
		return false
	}
	b := &bs[hour%24]
	if b.hour != hour {
		*b = quotaBucket{hour: hour}
	}
	b.n++
	return true
}

// give returns what take counted at now, for a publish that was not made
// durable (it recorded no key).
func (q *keyQuota) give(space string, now time.Time) {
	hour := now.Unix() / 3600
	q.mu.Lock()
	defer q.mu.Unlock()
	if bs := q.m[space]; bs != nil && bs[hour%24].hour == hour && bs[hour%24].n > 0 {
		bs[hour%24].n--
	}
}

// Publish sends req's messages to the queue and returns their IDs, in
// input order, once all are durable (replayed: the Idempotency-Key named
// an earlier publish with the same body, whose IDs these are, and nothing
// was sent). Every error is a problem; on an error nothing was sent.
func (c *Controller) Publish(ctx context.Context, req PublishRequest) (ids []string, replayed bool, err error) {
	p := req.Principal
	// The grant is checked before the UID is looked up, so that a
	// publisher learns nothing of the queues its grant does not name.
	if !p.CanPublish(req.Space, req.UID) {
		return nil, false, problem.Forbidden("the principal may not publish to this queue: publishing needs editor of AtLeastOnceQueue, or a publisher grant that names the queue")
	}
	if c.opts.Sender == nil {
		return nil, false, problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable, "this host has no sender for published messages")
	}
	if req.Idempotency.Key != "" {
		// One publish per key at a time, so that two retries racing each
		// other cannot both send.
		unlock := c.publishKeys.lock(req.Idempotency.Scope + "\x00" + req.Idempotency.Key)
		defer unlock()
		rec, err := c.st.Idempotency(ctx, req.Idempotency.Scope, req.Idempotency.Key)
		switch {
		case err == nil:
			if rec.Fingerprint != req.Idempotency.Fingerprint {
				return nil, false, problem.Unprocessable(problem.CodeIdempotencyKeyReuse, "this Idempotency-Key was used for a publish with a different request body")
			}
			prior, ok := strings.CutPrefix(rec.OperationID, publishRecord)
			if !ok || prior == "" {
				return nil, false, problem.Unprocessable(problem.CodeIdempotencyKeyReuse, "this Idempotency-Key was used for another request")
			}
			return strings.Split(prior, ","), true, nil
		case !errors.Is(err, store.ErrNotFound):
			return nil, false, problem.Unavailable(err)
		}
	}
	r, err := c.load(ctx, req.Space, req.UID)
	if err != nil {
		return nil, false, err
	}
	if !c.forms.IsQueue(r.FormURL) {
		return nil, false, problem.New(http.StatusNotFound, problem.CodeNotAQueue, "a %s takes no messages: only an AtLeastOnceQueue is published to", c.forms.Name(r.FormURL))
	}
	if r.State == store.StateDeleting {
		return nil, false, problem.NotFound("the queue is being deleted")
	}
	var extra func([]string) []store.Mutation
	if rec := req.Idempotency.record(); rec != nil {
		now := c.now()
		if !c.publishQuota.take(req.Space, now, c.opts.MaxPublishKeysPerSpace) {
			return nil, false, problem.New(http.StatusTooManyRequests, problem.CodeLimitExceeded,
				"this space recorded %d publishes with an Idempotency-Key in the last %s, the most it keeps; publish without a key, or retry later", c.opts.MaxPublishKeysPerSpace, PublishKeyWindow)
		}
		defer func() {
			if err != nil {
				c.publishQuota.give(req.Space, now)
			}
		}()
		extra = func(ids []string) []store.Mutation {
			rec.OperationID, rec.CreateTime = publishRecord+strings.Join(ids, ","), c.now().UTC()
			return []store.Mutation{store.PutIdempotency{Record: *rec}}
		}
	}
	ids, err = c.opts.Sender.SendWith(ctx, req.UID, req.Messages, extra)
	if err != nil {
		return nil, false, publishProblem(err)
	}
	return ids, false, nil
}

// publishProblem is the problem of a failed send: the producer Binding's
// code (spec/runtime-abi.md §Producer Bindings) with its sentence.
func publishProblem(err error) error {
	switch {
	case errors.Is(err, abi.ErrBatchTooLarge):
		return problem.New(http.StatusBadRequest, problem.CodeBatchTooLarge, "a publish holds 1 to %d messages", abi.MaxSendBatch)
	case errors.Is(err, abi.ErrMessageTooLarge):
		return problem.New(http.StatusBadRequest, problem.CodeMessageTooLarge, "a message body is larger than %d bytes; nothing was sent", abi.MaxBodyBytes)
	case errors.Is(err, abi.ErrInvalidDelay):
		// The Binding rejects a delaySeconds out of range as invalid_body.
		return problem.New(http.StatusBadRequest, problem.CodeInvalidBody, "delaySeconds must be an integer from 0 to %d; nothing was sent", abi.MaxDelaySeconds)
	case err == abi.ErrInvalidBody:
		// The engine's only bare invalid_body: an empty body.
		return problem.New(http.StatusBadRequest, problem.CodeInvalidBody, "a message body is empty: a body has 1 to %d bytes; nothing was sent", abi.MaxBodyBytes)
	case errors.Is(err, abi.ErrInvalidBody):
		return problem.New(http.StatusBadRequest, problem.CodeInvalidBody, "%s; nothing was sent", abi.WorkerMessage(err))
	case errors.Is(err, abi.ErrUnknownQueue):
		return engineQueueErr(err)
	}
	return problem.Unavailable(err)
}
