package store

import (
	"context"
	"errors"
	"time"
)

// The interfaces below are what several hosts sharing one store need
// beyond Store (spec/cluster.md). A backend that serves a cluster
// (runtime/store/pgstore) implements them; the file journal, which one
// process owns, does not, and a host on it runs alone.

// Errors of the cluster interfaces. Callers test with errors.Is.
var (
	// ErrFenced: the lease named in a fenced write is no longer the
	// caller's (it expired and another holder, with a higher epoch, took
	// it, or it was released). Nothing of the write was applied. The
	// caller must stop acting for the leased thing at once.
	ErrFenced = errors.New("store: fenced: the lease has moved on")
	// ErrLeaseHeld: another holder's lease on the name has not expired.
	ErrLeaseHeld = errors.New("store: lease held by another holder")
)

// Lease is one holder's time-bounded ownership of a name (the delivery of
// one queue: "queue/<uid>"). Epoch is its fencing token: it increases
// every time the lease changes holder (or is taken again after a release
// or an expiry), never when the holder renews it, so a write fenced with
// an old epoch can be refused after a successor took over.
type Lease struct {
	Name   string
	Holder string
	Epoch  int64
	// Expires is the database's clock time after which another holder may
	// take the lease (UTC). Holders compare it with the database's clock,
	// never their own.
	Expires time.Time
}

// Leases hands out leases with fencing epochs.
type Leases interface {
	// Acquire takes the lease on name for holder for ttl: a free or
	// expired lease is taken with the next epoch; one holder already
	// holds is renewed (same epoch). A lease another holder still holds
	// is ErrLeaseHeld.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// Renew extends l by ttl if it is still the current lease (same holder
	// and epoch, not expired); otherwise ErrFenced.
	Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// Release gives l up (the next Acquire starts a new epoch). Releasing
	// a lease that already moved on is not an error.
	Release(ctx context.Context, l Lease) error
	// ApplyFenced is Store.Apply, made durable only if l is still the
	// current lease when it commits: the check and the writes are one
	// transaction, and a successor's Acquire waits for it, so a holder
	// that lost its lease (paused, partitioned, slow) can never write
	// over its successor. Otherwise ErrFenced and nothing is applied.
	ApplyFenced(ctx context.Context, l Lease, muts ...Mutation) error
	// LeaseList lists every lease, expired ones included, by name.
	LeaseList(ctx context.Context) ([]Lease, error)
}

// Member is one live host of a cluster.
type Member struct {
	ID string
	// Addr is where the host serves the Host API (for operators and for
	// forwarding); informational.
	Addr    string
	Started time.Time
	// Expires is the database's clock time after which the member counts
	// as dead unless it heartbeats again.
	Expires time.Time
}

// Membership tracks which hosts are alive, by heartbeat.
type Membership interface {
	// Heartbeat records that m is alive for ttl more (joining if new).
	Heartbeat(ctx context.Context, m Member, ttl time.Duration) error
	// Members lists the live members (not expired), by ID.
	Members(ctx context.Context) ([]Member, error)
	// Leave removes the member at once (a clean shutdown), so that its
	// leases can move without waiting for the heartbeat to expire.
	Leave(ctx context.Context, id string) error
}

// Notifier carries wake-ups between hosts: a send committed on one host
// wakes the queue's owner on another without polling.
type Notifier interface {
	// Notify delivers payload to every listener of channel on every host,
	// at most once, after the caller's writes committed. Notifications
	// are hints: a listener that missed one (it was reconnecting) must
	// recover by reading the store.
	Notify(ctx context.Context, channel, payload string) error
	// Listen calls f for each notification on channel until ctx ends or
	// stop is called; f runs on one goroutine, in order. After a lost
	// connection Listen reconnects and calls f with payload "" so the
	// listener re-reads what it might have missed.
	Listen(ctx context.Context, channel string, f func(payload string)) (stop func(), err error)
}
