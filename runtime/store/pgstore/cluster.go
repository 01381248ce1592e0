package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/takoform/queuehost/runtime/store"
)

// The cluster services (store.Leases, store.Membership, store.Notifier) on
// the same database. Every time is the database's clock, so that skew
// between hosts' clocks cannot make two of them hold one lease; a lease
// is written with the clock at the time of the write (clock_timestamp(),
// not now(), the transaction's start), so that a statement that waited
// on a row lock neither shortens the lease it writes nor takes as
// current one that expired meanwhile.
//
// Lock order: every statement or transaction that locks several lease
// rows locks them in name order (the fences of a group commit, RenewAll),
// so that a renewal and a fenced group commit never deadlock; the others
// lock one row.

var (
	_ store.Leases     = (*Store)(nil)
	_ store.Membership = (*Store)(nil)
	_ store.Notifier   = (*Store)(nil)
)

// micros is d in whole microseconds, at least 1, for SQL intervals.
func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

func scanLease(row pgx.Row) (store.Lease, error) {
	var l store.Lease
	err := row.Scan(&l.Name, &l.Holder, &l.Epoch, &l.Expires)
	l.Expires = l.Expires.UTC()
	return l, err
}

// Acquire takes a free or expired lease with the next epoch, or renews one
// the holder still holds; ErrLeaseHeld when another holder holds it.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := s.check(ctx); err != nil {
		return store.Lease{}, err
	}
	if holder == "" {
		return store.Lease{}, errors.New("pgstore: a lease needs a holder")
	}
	l, err := scanLease(s.pool.QueryRow(ctx, `
		INSERT INTO store_leases AS l (name, holder, epoch, expires)
		VALUES ($1, $2, 1, clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET
			epoch = CASE WHEN l.holder = EXCLUDED.holder AND l.expires > clock_timestamp() THEN l.epoch ELSE l.epoch + 1 END,
			holder = EXCLUDED.holder, expires = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE l.holder = EXCLUDED.holder OR l.expires <= clock_timestamp()
		RETURNING name, holder, epoch, expires`, name, holder, micros(ttl)))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("%w: %s", store.ErrLeaseHeld, name)
	}
	if err != nil {
		return store.Lease{}, s.readErr(err)
	}
	return l, nil
}

// Renew extends l if it is still current; ErrFenced otherwise.
func (s *Store) renewOnce(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if err := s.check(ctx); err != nil {
		return store.Lease{}, err
	}
	// The row is locked before the new expiry is computed: an UPDATE
	// evaluates its SET before it waits for a row lock (and again after
	// it only if the row changed), so a renewal that waited behind a
	// fenced write would otherwise date its lease from before the wait.
	n, err := scanLease(s.pool.QueryRow(ctx, `
		WITH locked AS MATERIALIZED (
			SELECT name FROM store_leases WHERE name = $1 AND holder = $2 AND epoch = $3
			FOR NO KEY UPDATE)
		UPDATE store_leases l SET expires = clock_timestamp() + $4 * interval '1 microsecond'
		FROM locked
		WHERE l.name = locked.name AND l.expires > clock_timestamp()
		RETURNING l.name, l.holder, l.epoch, l.expires`, l.Name, l.Holder, l.Epoch, micros(ttl)))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("%w: lease %s epoch %d", store.ErrFenced, l.Name, l.Epoch)
	}
	if err != nil {
		return store.Lease{}, s.readErr(err)
	}
	return n, nil
}

// ReleasedChannel is the Notifier channel on which Release announces the
// name of a lease it released, so that a host waiting for it can take it
// at once instead of at its next poll.
const ReleasedChannel = "store_lease_released"

// Release gives l up; the row keeps its epoch for the next holder to bump.
// The release is announced on ReleasedChannel when it commits.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `WITH r AS (
			UPDATE store_leases SET holder = '', expires = now()
			WHERE name = $1 AND holder = $2 AND epoch = $3 RETURNING name)
		SELECT pg_notify($4, name) FROM r`, l.Name, l.Holder, l.Epoch, ReleasedChannel); err != nil {
		return s.readErr(err)
	}
	return nil
}

// ApplyFenced is Apply, committed only if l is current at commit (see
// writer.fence).
func (s *Store) ApplyFenced(ctx context.Context, l store.Lease, muts ...store.Mutation) error {
	if l.Name == "" || l.Holder == "" {
		return errors.New("pgstore: ApplyFenced needs a lease")
	}
	return s.apply(ctx, &l, muts)
}

// LeaseList lists every lease by name.
func (s *Store) leaseListOnce(ctx context.Context) ([]store.Lease, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT name, holder, epoch, expires FROM store_leases ORDER BY name`)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Lease, error) { return scanLease(r) })
	if err != nil {
		return nil, s.readErr(err)
	}
	return out, nil
}

// Heartbeat records m alive for ttl more.
func (s *Store) Heartbeat(ctx context.Context, m store.Member, ttl time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if m.ID == "" {
		return errors.New("pgstore: a member needs an ID")
	}
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO store_members (id, addr, started, expires) VALUES ($1, $2, now(), now() + $3 * interval '1 microsecond')
		ON CONFLICT (id) DO UPDATE SET addr = EXCLUDED.addr, expires = EXCLUDED.expires`,
		m.ID, m.Addr, micros(ttl)); err != nil {
		return s.readErr(err)
	}
	return nil
}

// Members lists the members whose heartbeat has not expired.
func (s *Store) membersOnce(ctx context.Context) ([]store.Member, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, addr, started, expires FROM store_members WHERE expires > now() ORDER BY id`)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Member, error) {
		var m store.Member
		err := r.Scan(&m.ID, &m.Addr, &m.Started, &m.Expires)
		m.Started, m.Expires = m.Started.UTC(), m.Expires.UTC()
		return m, err
	})
	if err != nil {
		return nil, s.readErr(err)
	}
	return out, nil
}

// Leave removes the member at once.
func (s *Store) Leave(ctx context.Context, id string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM store_members WHERE id = $1`, id); err != nil {
		return s.readErr(err)
	}
	return nil
}

// Notify sends payload on channel with pg_notify (delivered when the
// statement's transaction commits: at once, here).
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return s.readErr(err)
	}
	return nil
}

// Listen LISTENs on channel on a connection of its own (a pooled one
// would be handed to others), calling f for each notification, in order;
// after a lost connection it reconnects and calls f(""). It is ListenMany
// with one channel.
func (s *Store) Listen(ctx context.Context, channel string, f func(payload string)) (stop func(), err error) {
	return s.ListenMany(ctx, map[string]func(string){channel: f})
}

// MessagesOf reads the records (not the bodies) of the given messages of
// a queue; IDs not stored are left out. The owner of a queue adopts with
// it the messages another host accepted.
func (s *Store) MessagesOf(ctx context.Context, queue string, ids []string) ([]store.Message, error) {
	return retryRead(ctx, s, func() ([]store.Message, error) {
		if err := s.check(ctx); err != nil {
			return nil, err
		}
		rows, err := s.pool.Query(ctx, `SELECT `+messageCols+` FROM store_messages WHERE queue = $1 AND id = ANY($2)`, queue, ids)
		if err != nil {
			return nil, s.readErr(err)
		}
		out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Message, error) { return scanMessage(row) })
		if err != nil {
			return nil, s.readErr(err)
		}
		return out, nil
	})
}

// RenewAll extends, in one statement, every lease of ls that is still
// current (same holder and epoch, not expired), and returns those renewed;
// a lease left out has moved on (fenced). The rows are locked in name
// order (see Lock order above), and a statement the database aborted for
// another transaction's sake is tried again.
func (s *Store) RenewAll(ctx context.Context, ls []store.Lease, ttl time.Duration) ([]store.Lease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	names := make([]string, len(ls))
	holders := make([]string, len(ls))
	epochs := make([]int64, len(ls))
	for i, l := range ls {
		names[i], holders[i], epochs[i] = l.Name, l.Holder, l.Epoch
	}
	return retryRead(ctx, s, func() ([]store.Lease, error) {
		for i := 1; ; i++ {
			out, err := s.renewAllOnce(ctx, names, holders, epochs, ttl)
			if isConflict(err) && i < readRetries && ctx.Err() == nil && !s.closed.Load() {
				continue // aborted for another transaction's sake: at once
			}
			return out, err
		}
	})
}

func (s *Store) renewAllOnce(ctx context.Context, names, holders []string, epochs []int64, ttl time.Duration) ([]store.Lease, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	// The rows are locked first, in name order (a MATERIALIZED CTE is
	// never folded into the UPDATE, whose join could take them in any
	// order), and only locked rows are written, their expiry computed
	// after the lock was taken (see renewOnce).
	rows, err := s.pool.Query(ctx, `
		WITH locked AS MATERIALIZED (
			SELECT l.name FROM store_leases l
			JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS x(name, holder, epoch)
				ON l.name = x.name AND l.holder = x.holder AND l.epoch = x.epoch
			ORDER BY l.name
			FOR NO KEY UPDATE OF l)
		UPDATE store_leases l SET expires = clock_timestamp() + $4 * interval '1 microsecond'
		FROM locked
		WHERE l.name = locked.name AND l.expires > clock_timestamp()
		RETURNING l.name, l.holder, l.epoch, l.expires`, names, holders, epochs, micros(ttl))
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Lease, error) { return scanLease(r) })
	if err != nil {
		return nil, s.readErr(err)
	}
	return out, nil
}

// Revoke ends whoever holds the lease on name now: the epoch moves on and
// the lease is free, so that the holder's next fenced write is refused
// (ErrFenced) and any host may take it. A host that must stop another's
// work on a queue at once (deleting its consumer) revokes its lease; the
// revocation waits for a fenced write in progress, as Acquire does. The
// release is announced on ReleasedChannel.
func (s *Store) Revoke(ctx context.Context, name string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `WITH r AS (
			UPDATE store_leases SET holder = '', epoch = epoch + 1, expires = now()
			WHERE name = $1 RETURNING name)
		SELECT pg_notify($2, name) FROM r`, name, ReleasedChannel); err != nil {
		return s.readErr(err)
	}
	return nil
}

// NotifyAll sends every payload of payloads on channel in one statement.
func (s *Store) NotifyAll(ctx context.Context, channel string, payloads []string) error {
	if len(payloads) == 0 {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, channel, payloads); err != nil {
		return s.readErr(err)
	}
	return nil
}

// Locker hands out locks by key shared by every host of the database
// (PostgreSQL session advisory locks), on connections of its own so that
// a held lock never takes a connection the store's writes need. A lock is
// released by its release function, or by the database when the holder's
// connection ends (the host died).
type Locker struct {
	pool *pgxpool.Pool
}

// NewLocker opens a Locker of at most maxConns locks held at once.
func (s *Store) NewLocker(ctx context.Context, maxConns int32) (*Locker, error) {
	cfg := s.pool.Config().Copy()
	cfg.MaxConns, cfg.MinConns = maxConns, 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, s.readErr(err)
	}
	return &Locker{pool: p}, nil
}

// Lock waits until it holds the lock of key (or ctx ends).
func (l *Locker) Lock(ctx context.Context, key string) (release func(), err error) {
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
		c.Release()
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
			// The session may still hold it: never hand it back.
			c.Conn().Close(uctx)
		}
		c.Release()
	}, nil
}

// Close closes the Locker's connections (releasing every lock).
func (l *Locker) Close() { l.pool.Close() }

// LeaseHeld reports whether a holder holds the lease on name now (not
// released, not expired).
func (s *Store) LeaseHeld(ctx context.Context, name string) (bool, error) {
	return retryRead(ctx, s, func() (bool, error) {
		if err := s.check(ctx); err != nil {
			return false, err
		}
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM store_leases WHERE name = $1 AND holder <> '' AND expires > now()`, name).Scan(&n); err != nil {
			return false, s.readErr(err)
		}
		return n > 0, nil
	})
}

// Forget deletes l's row if l is still its holder's, for leases whose
// epoch no write is fenced with (an Operation's claim): their rows would
// otherwise accumulate, one per Operation.
func (s *Store) Forget(ctx context.Context, l store.Lease) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM store_leases WHERE name = $1 AND holder = $2 AND epoch = $3`, l.Name, l.Holder, l.Epoch); err != nil {
		return s.readErr(err)
	}
	return nil
}

// ListenMany LISTENs on several channels over one connection of its own
// (a pooled one would be handed to others; a database's connections are
// few, and a host of a cluster listens on many channels). Each channel's
// handler runs on a goroutine of its own, in order; after a lost
// connection it reconnects and every handler is called with "".
func (s *Store) ListenMany(ctx context.Context, handlers map[string]func(payload string)) (stop func(), err error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	cfg := s.pool.Config().ConnConfig.Copy()
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		for ch := range handlers {
			if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
				c.Close(context.WithoutCancel(ctx))
				return nil, err
			}
		}
		return c, nil
	}
	conn, err := connect(ctx)
	if err != nil {
		return nil, s.readErr(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	queues := make(map[string]chan string, len(handlers))
	for ch, f := range handlers {
		q := make(chan string, 4096)
		queues[ch] = q
		wg.Go(func() {
			for {
				select {
				case <-lctx.Done():
					return
				case p := <-q:
					f(p)
				}
			}
		})
	}
	post := func(ch, p string) {
		if q, ok := queues[ch]; ok {
			select {
			case q <- p:
			case <-lctx.Done():
			}
		}
	}
	wg.Go(func() {
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		backoff := 50 * time.Millisecond
		for {
			n, err := conn.WaitForNotification(lctx)
			if err == nil {
				post(n.Channel, n.Payload)
				continue
			}
			if lctx.Err() != nil {
				return
			}
			s.log.Warn("pgstore: listener connection lost; reconnecting", "channels", len(handlers), "err", err)
			conn.Close(context.Background())
			conn = nil
			for conn == nil {
				select {
				case <-lctx.Done():
					return
				case <-time.After(backoff):
				}
				if conn, err = connect(lctx); err != nil {
					conn = nil
					backoff = min(2*backoff, 2*time.Second)
				}
			}
			backoff = 50 * time.Millisecond
			for ch := range handlers {
				post(ch, "") // anything may have been missed meanwhile: re-read
			}
		}
	})
	return func() { cancel(); wg.Wait() }, nil
}
