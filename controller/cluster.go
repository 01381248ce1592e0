package controller

import (
	"context"

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
