package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/takoform/queuehost/runtime/store"
)

// Reads (and Renew, which only extends a lease the caller holds) are
// retried, a few times within a moment, when they failed for
// want of a connection: a read changes nothing, so running it again is
// always safe, and a connection the server terminated (a restart of
// PostgreSQL, an administrator) is only found dead when the pool hands it
// out. A read the database refused, or that found nothing, is not retried.

// readRetries bounds the tries of a read: each failed try drops one dead
// connection from the pool, and after a restart of the server every idle
// one is dead.
const readRetries = 12

func retryRead[T any](ctx context.Context, s *Store, f func() (T, error)) (T, error) {
	backoff := time.Millisecond
	for i := 1; ; i++ {
		v, err := f()
		if err == nil || i == readRetries || !retryableRead(err) || ctx.Err() != nil || s.closed.Load() {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// retryableRead: the read failed for want of a connection, not because
// the database refused it or found nothing.
func retryableRead(err error) bool {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// admin_shutdown, crash_shutdown, cannot_connect_now, and the
		// connection_exception class.
		return pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code[:2] == "08"
	}
	return true
}

func (s *Store) Resource(ctx context.Context, uid string) (store.Resource, error) {
	return retryRead(ctx, s, func() (store.Resource, error) { return s.resourceOnce(ctx, uid) })
}

func (s *Store) ResourceByName(ctx context.Context, space, name string) (store.Resource, error) {
	return retryRead(ctx, s, func() (store.Resource, error) { return s.resourceByNameOnce(ctx, space, name) })
}

func (s *Store) Resources(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	return retryRead(ctx, s, func() ([]store.Resource, error) { return s.resourcesOnce(ctx, space, formURL) })
}

// ResourcePage lists a page of a space's resources (store.ResourceLister).
func (s *Store) ResourcePage(ctx context.Context, q store.ResourceQuery) ([]store.Resource, error) {
	return retryRead(ctx, s, func() ([]store.Resource, error) { return s.resourcePageOnce(ctx, q) })
}

func (s *Store) CountResources(ctx context.Context, space string) (int, error) {
	return retryRead(ctx, s, func() (int, error) { return s.countResourcesOnce(ctx, space) })
}

func (s *Store) Operation(ctx context.Context, id string) (store.Operation, error) {
	return retryRead(ctx, s, func() (store.Operation, error) { return s.operationOnce(ctx, id) })
}

func (s *Store) UnfinishedOperations(ctx context.Context) ([]store.Operation, error) {
	return retryRead(ctx, s, func() ([]store.Operation, error) { return s.unfinishedOperationsOnce(ctx) })
}

// Operations lists a page of a space's Operations (store.OperationLister).
func (s *Store) Operations(ctx context.Context, q store.OperationQuery) ([]store.Operation, error) {
	return retryRead(ctx, s, func() ([]store.Operation, error) { return s.operationsOnce(ctx, q) })
}

func (s *Store) Idempotency(ctx context.Context, scope, key string) (store.IdempotencyRecord, error) {
	return retryRead(ctx, s, func() (store.IdempotencyRecord, error) { return s.idempotencyOnce(ctx, scope, key) })
}

func (s *Store) Messages(ctx context.Context, queue string) ([]store.Message, error) {
	return retryRead(ctx, s, func() ([]store.Message, error) { return s.messagesOnce(ctx, queue) })
}

func (s *Store) Message(ctx context.Context, queue, id string) (store.Message, error) {
	return retryRead(ctx, s, func() (store.Message, error) { return s.messageOnce(ctx, queue, id) })
}

func (s *Store) MessageCount(ctx context.Context, queue string) (int, error) {
	return retryRead(ctx, s, func() (int, error) { return s.messageCountOnce(ctx, queue) })
}

func (s *Store) Bodies(ctx context.Context, queue string, ids []string) ([][]byte, error) {
	return retryRead(ctx, s, func() ([][]byte, error) { return s.bodiesOnce(ctx, queue, ids) })
}

func (s *Store) LeaseList(ctx context.Context) ([]store.Lease, error) {
	return retryRead(ctx, s, func() ([]store.Lease, error) { return s.leaseListOnce(ctx) })
}

func (s *Store) Members(ctx context.Context) ([]store.Member, error) {
	return retryRead(ctx, s, func() ([]store.Member, error) { return s.membersOnce(ctx) })
}

// Renew is retried like a read: extending a lease again is harmless.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	return retryRead(ctx, s, func() (store.Lease, error) { return s.renewOnce(ctx, l, ttl) })
}
