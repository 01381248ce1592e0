package controller

import (
	"context"
	"encoding/json"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/forensics"
	"github.com/takoform/queuehost/runtime/store"
)

// The forensics extensions (spec/peers.md §Attempt history, §Dead-letter
// groups): a message's attempt history in the inspection listing, a
// dead-letter queue's messages grouped by cause, and the redrive of one
// group (with a dry run), all for principals who may read (or change) the
// queue; a worker sees none of it.

// Dead-letter group histogram bounds.
const (
	DefaultGroupBuckets  = 24
	MaxGroupBuckets      = 168
	DefaultBucketSeconds = 3600
	MinBucketSeconds     = 60
	MaxBucketSeconds     = 86400
	fingerprintHexDigits = 16
)

// DeadLetterGroups is a queue's dead-lettered messages grouped by cause.
type DeadLetterGroups struct {
	Groups       []forensics.Group
	DeadLetters  int
	BucketMillis int64
	EndMillis    int64
}

// GroupDeadLetters groups the dead-lettered messages of a queue by cause
// (forensics.Groups), with a histogram of buckets buckets of bucketSeconds
// each, ending now; p must be able to read the queue. It reads every
// message record of the queue (not their bodies).
func (c *Controller) GroupDeadLetters(ctx context.Context, p *auth.Principal, space, uid string, buckets, bucketSeconds int) (DeadLetterGroups, error) {
	if buckets < 0 || buckets > MaxGroupBuckets {
		return DeadLetterGroups{}, problem.InvalidRequest("buckets must be an integer from 0 to %d", MaxGroupBuckets)
	}
	if bucketSeconds == 0 {
		bucketSeconds = DefaultBucketSeconds
	}
	if bucketSeconds < MinBucketSeconds || bucketSeconds > MaxBucketSeconds {
		return DeadLetterGroups{}, problem.InvalidRequest("bucketSeconds must be an integer from %d to %d", MinBucketSeconds, MaxBucketSeconds)
	}
	if _, err := c.queueToInspect(ctx, p, space, uid); err != nil {
		return DeadLetterGroups{}, err
	}
	dead, err := c.deadLetters(ctx, uid)
	if err != nil {
		return DeadLetterGroups{}, err
	}
	out := DeadLetterGroups{DeadLetters: len(dead), BucketMillis: int64(bucketSeconds) * 1000, EndMillis: c.now().UTC().UnixMilli()}
	out.Groups = forensics.Groups(dead, forensics.GroupOptions{Buckets: buckets, Bucket: out.BucketMillis, End: out.EndMillis})
	return out, nil
}

// deadLetters is the messages of a queue that arrived by dead-lettering.
func (c *Controller) deadLetters(ctx context.Context, uid string) ([]store.Message, error) {
	all, err := c.st.Messages(ctx, uid)
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	dead := all[:0]
	for _, m := range all {
		if m.DeadLetter != nil {
			dead = append(dead, m)
		}
	}
	return dead, nil
}

// groupMembers is the set of IDs of uid's dead-lettered messages in
// group (a fingerprint).
func (c *Controller) groupMembers(ctx context.Context, uid, group string) (map[string]bool, error) {
	dead, err := c.deadLetters(ctx, uid)
	if err != nil {
		return nil, err
	}
	members := map[string]bool{}
	for _, m := range dead {
		if forensics.Fingerprint(m.History) == group {
			members[m.ID] = true
		}
	}
	return members, nil
}

// validGroup reports whether g is a fingerprint as forensics writes it.
func validGroup(g string) bool {
	if len(g) != fingerprintHexDigits {
		return false
	}
	for _, r := range g {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// withHistory adds each listed message's attempt history (and, for a
// dead letter, its group) from the store: the engine keeps neither in
// memory. A message gone meanwhile keeps none.
func (c *Controller) withHistory(ctx context.Context, uid string, page []MessageView) error {
	for i := range page {
		m, err := c.st.Message(ctx, uid, page[i].ID)
		if err != nil {
			continue
		}
		page[i].History = m.History
		page[i].TraceParent = m.TraceParent
		if m.DeadLetter != nil {
			page[i].Group = forensics.Fingerprint(m.History)
		}
	}
	return nil
}

// redriveSelection is the messages a redrive considers: every message of
// the queue, or with req.Group the dead letters of that group.
func (c *Controller) redriveSelection(ctx context.Context, req QueueOpRequest) ([]store.Message, error) {
	all, err := c.st.Messages(ctx, req.UID)
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	if req.Group == "" {
		return all, nil
	}
	out := all[:0]
	for _, m := range all {
		if m.DeadLetter != nil && forensics.Fingerprint(m.History) == req.Group {
			out = append(out, m)
		}
	}
	return out, nil
}

// dryRunRedrive records a redrive's dry run: an Operation of kind redrive
// that is done when it is written, moved nothing, and reports what would
// move (each selected message with a target queue that exists) and what
// would be skipped. A message held by a batch now is counted as one that
// would move. Called with the space's lock held, which it releases.
func (c *Controller) dryRunRedrive(ctx context.Context, op store.Operation, req QueueOpRequest, sel []store.Message, unlock func()) (store.Operation, error) {
	defer unlock()
	exists := map[string]bool{}
	would, skipped := 0, 0
	for _, m := range sel {
		target := req.Target
		if target == "" && m.DeadLetter != nil {
			target = m.DeadLetter.SourceQueue
		}
		ok, seen := exists[target]
		if !seen && target != "" {
			r, err := c.st.Resource(ctx, target)
			ok = err == nil && r.State != store.StateDeleting && target != req.UID
			exists[target] = ok
		}
		if ok {
			would++
		} else {
			skipped++
		}
	}
	total, moved := len(sel), 0
	op.State, op.Effect = store.OpSucceeded, store.EffectNone
	op.Progress, _ = json.Marshal(QueueOpProgress{Total: &total, Moved: &moved, Skipped: &skipped, Group: req.Group, DryRun: true, WouldMove: &would})
	m, err := putOp(op)
	if err != nil {
		return store.Operation{}, err
	}
	muts := []store.Mutation{m}
	if rec := req.Idempotency.record(); rec != nil {
		rec.OperationID, rec.CreateTime = op.ID, op.CreateTime
		muts = append(muts, store.PutIdempotency{Record: *rec})
	}
	if err := c.st.Apply(context.WithoutCancel(ctx), muts...); err != nil {
		return store.Operation{}, problem.Unavailable(err)
	}
	c.log.Info("redrive dry run", "operation", op.ID, "queue", op.ResourceUID, "group", req.Group, "wouldMove", would, "skipped", skipped)
	if got, err := c.st.Operation(ctx, op.ID); err == nil {
		return got, nil // as the store keeps it (no intent)
	}
	op.Intent = nil
	return op, nil
}
