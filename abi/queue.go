// Package abi holds the types every layer of the host shares: a worker
// version as the JavaScript runtime runs it, and the queue ABI between the
// delivery engine and handler code (batches, messages, settlements, producer
// sends, and the Error.name codes of spec/runtime-abi.md).
//
// # Why one package
//
// The controller decodes a WorkerVersion record into a Version, the
// JavaScript runtime (and the sandbox processes that run it) executes it, and
// the delivery engine hands Batches to the Handler the runtime provides. Each
// of those layers used to keep a mirror of these types and the host converted
// between them. Here they are defined once, with no dependency on any layer,
// in the spirit of River's rivertype: every package may import abi, abi
// imports nothing of the host.
package abi

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Limits from AtLeastOnceQueue 0.2.0 §producer Binding and QueueConsumer 0.3.0.
const (
	MaxBodyBytes    = 127000
	MaxSendBatch    = 100
	MaxDelaySeconds = 43200
	MaxIDLength     = 256
)

// Errors of the delivery engine. Each maps to the Error.name the Forms give
// (see Code); the JavaScript runtime uses that name for the rejection.
var (
	ErrUnknownBatch       = errors.New("the batch is not running: its handler invocation has ended")
	ErrUnknownMessage     = errors.New("no message with that ID is in this batch")
	ErrAlreadySettled     = errors.New("the message is already settled")
	ErrBackendUnavailable = errors.New("the queue backend is unavailable")
	// ErrInvalidBody covers the message and its options (the Forms' one
	// name for both); the error wrapping it says which part is wrong.
	ErrInvalidBody     = errors.New("the message or its options are not valid")
	ErrMessageTooLarge = errors.New("the message body is larger than 127000 bytes")
	ErrBatchTooLarge   = errors.New("a batch holds 1 to 100 messages")
	// ErrInvalidDelay is an argument error, not a Form code: the JavaScript
	// runtime reports it as a RangeError.
	ErrInvalidDelay = errors.New("delaySeconds must be an integer from 0 to 43200")
	// ErrUnknownQueue: the queue is not (or no longer) known to the engine.
	ErrUnknownQueue = errors.New("the queue does not exist")
	// ErrNotStarted: a Handler did not start the batch because the time
	// by which it had to start (StartBy) had passed: the handler did not
	// run. The engine gives the delivery's attempt back.
	ErrNotStarted = errors.New("the batch was not started: the time by which its handler had to start had passed")
)

type startByKey struct{}

// WithStartBy returns ctx carrying the time by which a Handler must start
// the batch it is given: the end of the queue's lease as the host's own
// monotonic clock knows it, in a cluster of hosts. A handler that runs
// the batch elsewhere (a sandbox process) checks it there, right before
// it starts, and returns ErrNotStarted once it has passed, so that a host
// frozen between its last check and the hand-over does not run a batch
// another host may be delivering again.
func WithStartBy(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, startByKey{}, t)
}

// StartBy returns the time set by WithStartBy, if any.
func StartBy(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(startByKey{}).(time.Time)
	return t, ok
}

// BodyRule is what a message body must be, for the errors that blame it.
const BodyRule = "a body is a string, an ArrayBuffer or an ArrayBufferView of at least one byte"

// WorkerMessage is err's text for a worker: an invalid_body error says only what
// its wrapper says (which part of the message or options is wrong), not the
// sentinel's generic text after it.
func WorkerMessage(err error) string {
	msg := err.Error()
	if errors.Is(err, ErrInvalidBody) {
		if m := strings.TrimSuffix(msg, ": "+ErrInvalidBody.Error()); m != "" {
			return m
		}
	}
	return msg
}

// Code returns the stable code of err: the Form's Error.name for the
// engine's errors ("unknown_batch", ...), "RangeError" for ErrInvalidDelay,
// "backend_unavailable" for ErrUnknownQueue and for every other error.
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnknownBatch):
		return "unknown_batch"
	case errors.Is(err, ErrUnknownMessage):
		return "unknown_message"
	case errors.Is(err, ErrAlreadySettled):
		return "already_settled"
	case errors.Is(err, ErrInvalidBody):
		return "invalid_body"
	case errors.Is(err, ErrMessageTooLarge):
		return "message_too_large"
	case errors.Is(err, ErrBatchTooLarge):
		return "batch_too_large"
	case errors.Is(err, ErrInvalidDelay):
		return "RangeError"
	default:
		return "backend_unavailable"
	}
}

// OutgoingMessage is one message handed to Send. Delay nil means the queue's
// deliveryDelaySeconds.
type OutgoingMessage struct {
	Body  []byte
	Delay *int
}

// Message is one message of a delivered batch.
type Message struct {
	ID              string
	TimestampMillis int64 // accept time, UTC epoch milliseconds
	Body            []byte
	Attempts        int // 1 on the first delivery
}

// Handler runs a consumer's queue handler for one batch. A nil return
// means the handler returned normally (the engine acknowledges what is
// unsettled); an error means it threw, rejected or ran out of time (the
// engine retries what is unsettled after retryDelaySeconds). ctx carries the
// host's handler time limit.
type Handler interface {
	HandleBatch(ctx context.Context, b *Batch) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, b *Batch) error

func (f HandlerFunc) HandleBatch(ctx context.Context, b *Batch) error { return f(ctx, b) }

// Resolver finds the Handler of a ModuleWorker at delivery time, so that a
// change of the worker's selected version applies to the next batch. An error
// means no handler can run now: the engine delivers nothing (no attempt is
// counted) and tries again later.
type Resolver interface {
	Resolve(ctx context.Context, workerUID string) (Handler, error)
}

// SettleKind names the four settlement methods.
type SettleKind int

const (
	Acknowledge SettleKind = iota + 1
	Retry
	AcknowledgeAll
	RetryAll
)

// Settlement is one call of a settlement method.
type Settlement struct {
	Kind      SettleKind
	MessageID string // Acknowledge and Retry
	Delay     *int   // Retry and RetryAll; nil means retryDelaySeconds
}

// Settler applies settlements of running batches; the Engine is one.
type Settler interface {
	Settle(ctx context.Context, batchID string, s Settlement) error
}

// Batch is one delivery of 1..maxBatchSize messages to a handler. Its
// methods are bound to it, as the Form requires: JavaScript calls pass no
// batch ID. They return only once the settlement is durable.
type Batch struct {
	ID       string
	Queue    string // the queue resource's name
	Messages []Message
	settler  Settler
}

// NewBatch makes a batch whose settlements go to s.
func NewBatch(id, queue string, msgs []Message, s Settler) *Batch {
	return &Batch{ID: id, Queue: queue, Messages: msgs, settler: s}
}

func (b *Batch) Acknowledge(ctx context.Context, messageID string) error {
	return b.settler.Settle(ctx, b.ID, Settlement{Kind: Acknowledge, MessageID: messageID})
}

func (b *Batch) Retry(ctx context.Context, messageID string, delay *int) error {
	return b.settler.Settle(ctx, b.ID, Settlement{Kind: Retry, MessageID: messageID, Delay: delay})
}

func (b *Batch) AcknowledgeAll(ctx context.Context) error {
	return b.settler.Settle(ctx, b.ID, Settlement{Kind: AcknowledgeAll})
}

func (b *Batch) RetryAll(ctx context.Context, delay *int) error {
	return b.settler.Settle(ctx, b.ID, Settlement{Kind: RetryAll, Delay: delay})
}
