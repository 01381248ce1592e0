package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
)

// Active/standby on a shared PostgreSQL store (spec/cluster.md, the first
// step of phase 2). Until delivery ownership is spread across hosts, one
// host at a time owns the database: it holds the lease activeLease, and
// every write it makes is fenced with that lease (pgstore.ApplyFenced).
// Another host started on the same database waits as a standby, without
// serving, until the lease is free (released by a clean shutdown) or has
// expired (the active host died or froze), then takes it with a higher
// epoch and starts. A host that loses its lease (it was paused past its
// ttl and a standby took over) finds its next write refused with
// store.ErrFenced, so it can never write over its successor, and stops
// (Host.Lost).
const activeLease = "host/active"

// DefaultClusterTTL is the active host's lease ttl when Config.ClusterTTL
// is zero: a standby takes over at most this long (plus a tenth) after the
// active host died.
const DefaultClusterTTL = 10 * time.Second

// activeStore is the PostgreSQL store as the active host writes it: Apply
// is fenced with the active lease, renewed in the background.
type activeStore struct {
	*pgstore.Store
	log   *slog.Logger
	id    string
	addr  string
	ttl   time.Duration
	lease atomic.Pointer[store.Lease]

	lost     chan struct{}
	lostOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newHostID() string {
	h, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
}

// becomeActive waits until this host holds the active lease (or ctx ends),
// then starts renewing it.
func becomeActive(ctx context.Context, pg *pgstore.Store, id, addr string, ttl time.Duration, log *slog.Logger) (*activeStore, error) {
	poll := max(ttl/10, 100*time.Millisecond)
	waiting := false
	// A release (a clean shutdown of the active host) wakes the standby at
	// once; expiry is found by polling.
	released := make(chan struct{}, 1)
	var stopListen func()
	defer func() {
		if stopListen != nil {
			stopListen()
		}
	}()
	for {
		l, err := pg.Acquire(ctx, activeLease, id, ttl)
		if err == nil {
			if waiting {
				log.Info("standby: took over as the active host", "host", id, "epoch", l.Epoch)
			} else {
				log.Info("active host on the database", "host", id, "epoch", l.Epoch, "leaseTTL", ttl.String())
			}
			a := &activeStore{Store: pg, log: log, id: id, addr: addr, ttl: ttl, lost: make(chan struct{})}
			a.lease.Store(&l)
			rctx, cancel := context.WithCancel(context.Background())
			a.cancel = cancel
			a.wg.Go(func() { a.renew(rctx) })
			return a, nil
		}
		switch {
		case errors.Is(err, store.ErrLeaseHeld):
		case errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil:
			// The database is restarting or unreachable for a moment: a
			// standby keeps waiting (Open already proved it reachable).
			log.Warn("standby: asking for the active lease failed; retrying", "err", err)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("standby: %w", ctx.Err())
			case <-time.After(poll):
			}
			continue
		default:
			return nil, fmt.Errorf("taking the active lease: %w", err)
		}
		if !waiting {
			holder := ""
			if ls, err := pg.LeaseList(ctx); err == nil {
				for _, x := range ls {
					if x.Name == activeLease {
						holder = x.Holder
					}
				}
			}
			log.Info("standby: another host is active on this database; waiting for its lease to be released or to expire", "host", id, "active", holder, "leaseTTL", ttl.String())
			waiting = true
			stop, err := pg.Listen(ctx, pgstore.ReleasedChannel, func(name string) {
				if name == activeLease || name == "" {
					select {
					case released <- struct{}{}:
					default:
					}
				}
			})
			if err == nil {
				stopListen = stop
			} else {
				log.Warn("standby: cannot listen for the active lease's release; polling only", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("standby: %w", ctx.Err())
		case <-released:
		case <-time.After(poll):
		}
	}
}

// renew extends the lease every ttl/3 and heartbeats the membership. The
// lease is lost when the database says it moved on, or when no renewal
// succeeded for a whole ttl (by this host's clock, counted from before
// the last successful call, so never later than the database's expiry).
func (a *activeStore) renew(ctx context.Context) {
	last := time.Now()
	wait := a.ttl / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = a.ttl / 3
		start := time.Now()
		cur := *a.lease.Load()
		l, err := a.Store.Renew(ctx, cur, a.ttl)
		if err == nil {
			a.lease.Store(&l)
			last = start
			_ = a.Store.Heartbeat(ctx, store.Member{ID: a.id, Addr: a.addr}, a.ttl)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, store.ErrFenced) || time.Since(last) > a.ttl {
			a.markLost(err)
			return
		}
		a.log.Warn("renewing the active lease failed; retrying", "err", err)
		wait = min(a.ttl/10, 200*time.Millisecond)
	}
}

func (a *activeStore) markLost(err error) {
	a.lostOnce.Do(func() {
		a.log.Error("lost the active lease: another host may have taken over; this host stops writing and must exit", "host", a.id, "err", err)
		close(a.lost)
	})
}

// Apply is fenced with the active lease: a host that lost it applies
// nothing (store.ErrUnavailable wrapping store.ErrFenced).
func (a *activeStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	err := a.Store.ApplyFenced(ctx, *a.lease.Load(), muts...)
	if errors.Is(err, store.ErrFenced) {
		a.markLost(err)
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// Close stops renewing, releases the lease (a standby takes over at once)
// and closes the store.
func (a *activeStore) Close() error {
	a.cancel()
	a.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	select {
	case <-a.lost:
	default:
		if err := a.Store.Release(ctx, *a.lease.Load()); err != nil {
			a.log.Warn("releasing the active lease", "err", err)
		}
	}
	_ = a.Store.Leave(ctx, a.id)
	return a.Store.Close()
}
