package broker

import (
	"context"
	"errors"

	"github.com/takoform/queuehost/runtime/store"
)

// Errors a Driver returns; callers test with errors.Is.
var (
	// ErrUnavailable: the broker cannot be reached now (the connection is
	// down and being re-established) or did not confirm an operation.
	// Nothing is known to have happened; the store wraps it in
	// store.ErrUnavailable, which the Host API answers backend_unavailable.
	ErrUnavailable = errors.New("broker: unavailable")
	// ErrQueueGone: the broker has no such queue (deleted on the broker's
	// side, or never declared).
	ErrQueueGone = errors.New("broker: the queue does not exist on the broker")
)

// Envelope is one message as the broker holds it: the body and every part
// of the message's delivery state the Forms need after a restart. A
// driver stores all of it with the message (RabbitMQ headers, SQS
// message attributes) and gives it back unchanged.
type Envelope struct {
	ID string
	// AcceptedAt and VisibleAt are UTC epoch milliseconds, as in
	// store.Message.
	AcceptedAt int64
	VisibleAt  int64
	// Attempts counts the deliveries recorded so far.
	Attempts int
	// Rev is the copy's revision: a message's state changes by publishing
	// a new copy with Rev+1 and then removing the old one, so that two
	// copies left by a crash in between are told apart (the higher wins).
	Rev        int64
	DeadLetter *store.DeadLetter
	// TraceParent is the send's trace context (store.Message.TraceParent).
	TraceParent string
	// History is the message's attempt history (store.Message.History),
	// carried by every copy so that it survives a host restart.
	History []store.Attempt
	Body    []byte
}

// Delivery is one copy of a message received from the broker, with the
// driver's handle to remove it. The copy stays on the broker, invisible to
// others, until it is acknowledged or the handle is lost.
type Delivery struct {
	Envelope
	// Handle is the driver's: a RabbitMQ delivery tag on its channel, an
	// SQS receipt handle.
	Handle any
	// Foreign is set when the copy carries no envelope (a producer other
	// than a host put it there): Envelope then holds only the body, the
	// broker's message ID if any and the time it was received.
	Foreign bool
}

// Queue names one queue on a broker. Name is the broker's name for it,
// derived by the store from the resource (see QueueName).
type Queue struct {
	UID  string
	Name string
}

// Consumer receives a queue's messages. Deliver is called for each copy,
// in the broker's order, never concurrently for one queue. Lost is called
// when every handle given so far became invalid (the connection dropped):
// the broker redelivers those copies, with new handles, once it is back.
// Gone is called when the broker reports the queue deleted.
type Consumer struct {
	Deliver func(Delivery)
	Lost    func()
	Gone    func()
}

// Driver is one broker. Its methods are safe for concurrent use. A Driver
// reconnects by itself, with backoff, after a connection loss; while it is
// disconnected, operations fail at once with ErrUnavailable.
//
// The contract, which brokertest checks for every driver:
//
//   - Publish returns nil only once the broker has made every envelope
//     durable (RabbitMQ publisher confirms, SQS's answer to SendMessage).
//   - Every published envelope is delivered to the queue's Consumer,
//     again after every Lost, until it is acknowledged.
//   - Ack returns nil only once the broker has processed the removal of
//     the copies; an error means they may or may not be removed.
//   - A queue deleted on the broker's side is reported by Stat (exists
//     false) and by the Consumer's Gone; it is not declared again.
type Driver interface {
	// Kind is "rabbitmq" or "sqs".
	Kind() string
	// Declare creates the queue if it does not exist.
	Declare(ctx context.Context, q Queue) error
	// Delete removes the queue and every message in it; an absent queue
	// is not an error.
	Delete(ctx context.Context, q Queue) error
	// Stat reports whether the queue exists and how many of its messages
	// wait on the broker, not delivered to any consumer (RabbitMQ's
	// ready count, SQS's ApproximateNumberOfMessages).
	Stat(ctx context.Context, q Queue) (exists bool, ready int, err error)
	Publish(ctx context.Context, q Queue, envs []Envelope) error
	// Purge removes the messages waiting on the broker (not those
	// delivered and unacknowledged) and reports how many.
	Purge(ctx context.Context, q Queue) (int, error)
	// Consume starts receiving q's messages until stop is called, across
	// reconnects.
	Consume(q Queue, c Consumer) (stop func(), err error)
	// Ack removes delivered copies by their handles.
	Ack(ctx context.Context, q Queue, handles []any) error
	Close() error
}
