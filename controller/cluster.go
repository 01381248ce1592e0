package controller

import (
	"context"
	"time"

	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// What a host of a cluster (several hosts on one database, spec/cluster.md)
// needs of the controller to follow resource changes made by the others.

// QueueConfigOf is the engine's configuration of a stored
// AtLeastOnceQueue.
func QueueConfigOf(r store.Resource) (delivery.QueueConfig, error) { return queueConfigOf(r) }

// ConsumerConfigOf is the engine's configuration of a stored
// QueueConsumer.
func ConsumerConfigOf(r store.Resource) (delivery.ConsumerConfig, error) {
	return consumerConfigOf(r)
}

// Reindex re-reads a resource another host wrote, so that the reference
// index (dependency checks on delete) sees its references.
func (c *Controller) Reindex(ctx context.Context, uid string) { c.reindex(ctx, uid) }

// busy reports the unresolved Operation on uid: one this host drives, or,
// on a store shared with other hosts (Options.SharedLock), one whose
// transitional record another host wrote (its ID is then not known
// here).
func (c *Controller) busy(ctx context.Context, uid string) (inflightOp, bool) {
	if fl, ok := c.unresolved(ctx, uid); ok || c.opts.SharedLock == nil || uid == "" {
		return fl, ok
	}
	r, err := c.st.Resource(ctx, uid)
	if err != nil {
		return inflightOp{}, false
	}
	switch r.State {
	case store.StateCreating, store.StateUpdating, store.StateDeleting, store.StateReconciling:
	default:
		// A purge or a redrive leaves the queue's record as it is: it is
		// found among the unfinished Operations.
		if c.forms.IsQueue(r.FormURL) {
			if id, ok, _ := c.queueOpElsewhere(ctx, uid); ok {
				return inflightOp{id: id, kind: KindPurge}, true
			}
		}
		return inflightOp{}, false
	}
	if ops, err := c.st.UnfinishedOperations(ctx); err == nil {
		for _, op := range ops {
			if op.ResourceUID == uid {
				return inflightOp{id: op.ID, kind: op.Kind}, true
			}
		}
	}
	kind := KindDelete
	switch r.State {
	case store.StateCreating:
		kind = KindCreate
	case store.StateUpdating:
		kind = KindUpdate
	}
	return inflightOp{id: "(on another host)", kind: kind}, true
}

// reindexSpace indexes the references of every stored resource of space
// (entries of resources deleted meanwhile are harmless: a referrer that is
// gone is skipped when read).
func (c *Controller) reindexSpace(ctx context.Context, space string) error {
	list, err := c.st.Resources(ctx, space, "")
	if err != nil {
		return err
	}
	for _, r := range list {
		c.index(r)
	}
	return nil
}

// ResumeUnfinished drives, in the background, every unfinished Operation
// of the store that this host is not driving now: on a store shared by
// several hosts, those whose host died are resumed here (drive claims each
// first, so one another host is driving is left to it).
// Operations updated less than minAge ago are left alone (their host is
// most likely driving them).
func (c *Controller) ResumeUnfinished(ctx context.Context, minAge time.Duration) {
	ops, err := c.st.UnfinishedOperations(ctx)
	if err != nil {
		return
	}
	for _, op := range ops {
		if c.now().Sub(op.UpdateTime) < minAge {
			continue
		}
		if _, ok := decodeIntent(op); !ok && op.Kind != KindPurge && op.Kind != KindRedrive {
			continue
		}
		c.opMu.Lock()
		busy := c.driving[op.ID]
		c.opMu.Unlock()
		if busy {
			continue
		}
		c.goBackground(func(bg context.Context) { c.drive(bg, op) })
	}
}
