// Package store defines the host's durable state and the interface every
// backend implements.
//
// The model is a replicated-state-machine one, as in etcd's raft log: every
// change is a Mutation, a closed set of small value types; Apply makes a
// group of mutations durable as one atomic unit and only then applies them to
// the readable state. Readers never observe a change that could still be
// lost. The same mutations replayed from the journal rebuild the same state,
// so live apply and recovery share one code path.
//
// The embedded backend is the file journal in runtime/journal (see Open in
// journaled.go). The PostgreSQL backend, runtime/store/pgstore, translates
// each Apply into one transaction, so that several hosts can share one
// database; every backend passes the same suite in runtime/store/storetest.
//
// Two backends live here. Journaled (Open) is the durable one: each Apply
// is one CRC-checked frame of the group-committed journal, applied to
// memory on the journal's writer in journal order once it is durable;
// message bodies stay in the journal and are read back by position, so a
// large backlog costs about a hundred bytes of memory per message; and a
// background compactor rewrites the live records of the oldest segment to
// the head and deletes it (oldest first only, which keeps deletes and
// removals correct on replay). Memory (NewMemory) is the same state
// machine without a journal, for tests and the ":memory:" dev mode; it is
// not durable. The design is explained at the top of journaled.go and in
// runtime/journal.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// Errors returned by every Store implementation. Callers test with errors.Is.
var (
	// ErrNotFound: the requested record does not exist (or was deleted).
	ErrNotFound = errors.New("store: not found")
	// ErrUnavailable: the backend could not make a change durable (disk
	// full, fsync failure, I/O error). Nothing of the failed Apply was
	// applied; later calls may succeed once the cause is gone.
	ErrUnavailable = errors.New("store: backend unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrNoSpace: the backend is nearly out of space and refuses what
	// would grow the state (new messages, new resources) until space is
	// freed; settlements and deletes still succeed. Errors that wrap it
	// wrap ErrUnavailable too.
	ErrNoSpace = errors.New("store: free disk space is below the reserve; new messages and resources are refused until messages are settled or resources deleted")
)

// Resource states, as the Host API reports them.
const (
	StateCreating    = "creating"
	StateActive      = "active"
	StateUpdating    = "updating"
	StateDeleting    = "deleting"
	StateReconciling = "reconciling"
)

// Resource is the management record of one Host API v2 resource.
type Resource struct {
	UID      string `json:"uid"`
	Space    string `json:"space"`
	Name     string `json:"name"`
	FormURL  string `json:"formUrl"`
	Offering string `json:"offering"`
	// Spec is the accepted spec document, exactly as validated.
	Spec json.RawMessage `json:"spec"`
	// PrivateInputs is never returned by the Host API.
	PrivateInputs json.RawMessage `json:"privateInputs,omitempty"`
	// Observed is what the host last confirmed; "{}" before the first
	// observation.
	Observed   json.RawMessage `json:"observed"`
	State      string          `json:"state"`
	Generation int64           `json:"generation"`
	ETag       string          `json:"etag"`
	CreateTime time.Time       `json:"createTime"`
	UpdateTime time.Time       `json:"updateTime"`
	// Exports lists the handlers a WorkerVersion's main module exports
	// ("fetch", "queue"), recorded when the version is admitted. Empty for
	// other Forms.
	Exports []string `json:"exports,omitempty"`
	// Creator is the principal that created the resource. A WorkerVersion
	// runs as its creator.
	Creator string `json:"creator,omitempty"`
	// Paused is the host extension "inactive delivery" of an
	// AtLeastOnceQueue (spec/peers.md): the queue accepts sends but no
	// batch starts. It is not part of the spec (the Form is closed) and
	// survives updates of it. False for other Forms.
	Paused bool `json:"paused,omitempty"`
}

// Operation states and effects (see spec/host-api.md §Operations).
const (
	OpPending     = "pending"
	OpRunning     = "running"
	OpSucceeded   = "succeeded"
	OpFailed      = "failed"
	OpReconciling = "reconciling"

	EffectNone    = "none"
	EffectPartial = "partial"
	EffectUnknown = "unknown"
	EffectApplied = "applied"
)

// Operation is one create, update or delete of a resource.
type Operation struct {
	ID          string `json:"id"`
	Space       string `json:"space"`
	Kind        string `json:"kind"` // "create", "update", "delete"
	ResourceUID string `json:"resourceUid"`
	State       string `json:"state"`
	Effect      string `json:"effect"`
	// Error is an RFC 9457 problem document, set when State is failed.
	Error          json.RawMessage `json:"error,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Principal      string          `json:"principal"`
	// FormURL is the Form of the resource the Operation changes: what a
	// reader of the Operation must be allowed to read. It outlives Intent.
	FormURL string `json:"formUrl,omitempty"`
	// Intent is the journaled description of the effect the Operation is
	// about to cause (the desired resource record, for example). An
	// Operation with an intent and no outcome is settled by observation on
	// restart, or stays reconciling. A store drops the intent of a Done
	// Operation (it reads back nil): it can hold a whole resource, module
	// content included, and nothing needs it once the outcome is recorded.
	Intent json.RawMessage `json:"intent,omitempty"`
	// Progress is what a long-running host-extension Operation (a redrive,
	// a purge: spec/peers.md) reports of its work, as its owner encodes
	// it; unlike Intent it is kept once the Operation is Done. Nil for
	// the Forms' Operations.
	Progress   json.RawMessage `json:"progress,omitempty"`
	CreateTime time.Time       `json:"createTime"`
	UpdateTime time.Time       `json:"updateTime"`
}

// Done reports whether the Operation reached a final state. reconciling is
// not final.
func (o Operation) Done() bool { return o.State == OpSucceeded || o.State == OpFailed }

// IdempotencyRecord binds an Idempotency-Key in its scope to the Operation it
// created and to the fingerprint of the request body.
type IdempotencyRecord struct {
	// Scope identifies (principal, space, method, path); see server.
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint"`
	OperationID string    `json:"operationId"`
	CreateTime  time.Time `json:"createTime"`
}

// Message is the delivery state of one queue message. The body is stored
// separately and read with Store.Body, so that a large backlog does not have
// to live in memory.
type Message struct {
	Queue string `json:"queue"` // the queue resource's UID
	ID    string `json:"id"`
	// AcceptedAt and VisibleAt are UTC Unix epoch milliseconds.
	AcceptedAt int64 `json:"acceptedAt"`
	VisibleAt  int64 `json:"visibleAt"`
	// Attempts counts deliveries recorded so far (0 before the first).
	Attempts int `json:"attempts"`
	// Lease is the ID of the batch that holds the message while it is
	// delivered and unsettled; empty otherwise. After a restart a leased
	// message is no longer in any running batch: the engine treats it as
	// unsettled and delivers it again.
	Lease string `json:"lease,omitempty"`
	Size  int    `json:"size"` // body length in bytes
	// DeadLetter is set on a message that arrived by dead-lettering: where
	// it came from and why. It is host-side bookkeeping for operators (the
	// inspection listing, redrive), never part of what a worker sees: the
	// Forms give a dead-lettered message no portable link to its source.
	DeadLetter *DeadLetter `json:"deadLetter,omitempty"`
	// TraceParent is the W3C trace context (a traceparent header value)
	// of the span that sent the message, set only when the host traces
	// (package telemetry): each delivery's span links to it, after a
	// restart and a dead-letter move too. The store keeps it as it is
	// given; like DeadLetter it is host-side bookkeeping that never
	// reaches a worker.
	TraceParent string `json:"traceParent,omitempty"`
	// History is the message's attempt history (attempts.go), oldest
	// first, at most MaxAttempts; nil for a message never retried or
	// moved. Operators only, like DeadLetter.
	History []Attempt `json:"history,omitempty"`
}

// Dead-letter reasons.
const (
	// ReasonRetriesExhausted: the message had 1 + maxRetries deliveries.
	ReasonRetriesExhausted = "retries_exhausted"
)

// DeadLetter is the dead-letter metadata of a message (spec/peers.md
// §Dead-letter metadata): Wippy's x_dead_letter_reason and
// x_original_queue, RabbitMQ's x-death. The names are those the resources
// had when the message was dead-lettered.
type DeadLetter struct {
	SourceQueue     string `json:"sourceQueue"` // UID
	SourceQueueName string `json:"sourceQueueName,omitempty"`
	Consumer        string `json:"consumer,omitempty"` // UID of the QueueConsumer
	ConsumerName    string `json:"consumerName,omitempty"`
	Reason          string `json:"reason"`
	// Attempts is the deliveries the message had in its source queue.
	Attempts int `json:"attempts"`
	// OriginalID is the message's ID in its source queue.
	OriginalID string `json:"originalId,omitempty"`
	// DeadLetteredAt is UTC epoch milliseconds.
	DeadLetteredAt int64 `json:"deadLetteredAt"`
}

// ResourceCounter is optionally implemented by a Store that counts a
// space's resources without listing them, so that admission's per-space
// limit costs the same however many resources the space holds.
type ResourceCounter interface {
	CountResources(ctx context.Context, space string) (int, error)
}

// ResourceQuery selects one page of a space's resources, oldest first (by
// CreateTime, then UID), the order of the Host API's resource list.
type ResourceQuery struct {
	Space string
	// FormURL filters when not empty.
	FormURL string
	// After, when its UID is set, starts the page after that resource's
	// position (its CreateTime and UID): the last item of the previous page.
	After Resource
	// Limit is the most items the page holds (at least 1).
	Limit int
}

// ResourceLister is optionally implemented by a Store whose records are
// not all in the host's memory (PostgreSQL), so that a page of the
// resource list reads one page of records, not every record of the space.
type ResourceLister interface {
	ResourcePage(ctx context.Context, q ResourceQuery) ([]Resource, error)
}

// ResourceAfter reports whether a sorts after b in a ResourceQuery's
// order (oldest first): a page that ends at b goes on with a.
func ResourceAfter(a, b Resource) bool {
	if c := a.CreateTime.Compare(b.CreateTime); c != 0 {
		return c > 0
	}
	return a.UID > b.UID
}

// PageOf is a ResourceQuery's page of a full listing of its space (of its
// FormURL), for a store wrapper whose inner store cannot page.
func PageOf(list []Resource, q ResourceQuery) []Resource {
	out := make([]Resource, 0, min(len(list), max(q.Limit, 1)))
	for _, r := range list {
		if q.After.UID == "" || ResourceAfter(r, q.After) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Resource) int {
		if ResourceAfter(a, b) {
			return 1
		}
		if ResourceAfter(b, a) {
			return -1
		}
		return 0
	})
	return out[:min(len(out), max(q.Limit, 1))]
}

// OperationQuery selects one page of a space's Operations, newest first
// (by CreateTime, then ID, both descending).
type OperationQuery struct {
	Space string
	// State and ResourceUID filter when not empty.
	State       string
	ResourceUID string
	// Before, when its ID is set, starts the page after that Operation's
	// position (its CreateTime and ID): the last item of the previous page.
	Before Operation
	// Limit is the most items the page holds (at least 1).
	Limit int
}

// OperationLister is optionally implemented by a Store that lists a
// space's Operations (the Host API's Operation list). Operations expire
// (ExpireRecords), so a listing is bounded by a day's changes.
type OperationLister interface {
	Operations(ctx context.Context, q OperationQuery) ([]Operation, error)
}

// OperationBefore reports whether a sorts after b in an OperationQuery's
// order (newest first): a page that ends at b goes on with a.
func OperationBefore(a, b Operation) bool {
	if c := a.CreateTime.Compare(b.CreateTime); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// Store is the durable state of the host. Implementations are safe for
// concurrent use. Read methods return copies the caller may change, with
// times in UTC and without a monotonic clock reading, so that a value reads
// back the same before and after a restart.
type Store interface {
	// Apply makes muts durable as one atomic unit, then applies them to the
	// state that the read methods return. It returns only after the unit is
	// durable; on error nothing of it was applied (ErrUnavailable wraps the
	// cause). Mutations that refer to records which do not exist are no-ops,
	// so that replay after compaction is idempotent. Apply keeps no
	// reference to muts or to the slices they hold (message bodies) once
	// it returns: callers may reuse them.
	Apply(ctx context.Context, muts ...Mutation) error

	Resource(ctx context.Context, uid string) (Resource, error)
	// ResourceByName finds the resource of that name in space, if any.
	ResourceByName(ctx context.Context, space, name string) (Resource, error)
	// Resources lists the space's resources (all spaces when space is ""),
	// ordered by CreateTime then UID. formURL filters when not empty.
	Resources(ctx context.Context, space, formURL string) ([]Resource, error)

	Operation(ctx context.Context, id string) (Operation, error)
	// UnfinishedOperations lists Operations that are not Done, for recovery.
	UnfinishedOperations(ctx context.Context) ([]Operation, error)

	Idempotency(ctx context.Context, scope, key string) (IdempotencyRecord, error)

	// Messages lists every message of a queue, for the engine's start-up,
	// ordered by AcceptedAt, then ID.
	Messages(ctx context.Context, queue string) ([]Message, error)
	// Message returns one message's delivery state.
	Message(ctx context.Context, queue, id string) (Message, error)
	// MessageCount is the number of messages a queue holds.
	MessageCount(ctx context.Context, queue string) (int, error)
	// Bodies reads the bodies of a queue's messages, in the order of ids:
	// the delivery of a batch, or one message. A message the queue does
	// not hold has a nil body (a body is never empty); the error is for a
	// failed read. The returned slices are the caller's.
	Bodies(ctx context.Context, queue string, ids []string) ([][]byte, error)

	Close() error

	// ExpireRecords removes the Operations that are Done and were last
	// updated before cutoff, and the idempotency records created before
	// cutoff whose Operation is Done or gone, as DeleteOperation and
	// DeleteIdempotency mutations; it returns how many records it removed.
	// An unfinished Operation and the key that names it are never removed,
	// however old. The host calls it with now minus the contract's 24
	// hours, so that finished history does not grow without bound.
	ExpireRecords(ctx context.Context, cutoff time.Time) (int, error)
}
