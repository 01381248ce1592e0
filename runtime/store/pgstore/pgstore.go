// Package pgstore is the host's store on PostgreSQL: the same store.Store
// as the file journal (runtime/store), passing the same conformance suite
// (runtime/store/storetest), so that several host processes can share one
// database.
//
// Why it looks like this:
//
//   - Every record of the model is a row (store_resources,
//     store_operations, store_idempotency, store_messages with the body in
//     a bytea), and every Apply is one transaction, so "durable, then
//     visible, all or nothing" is the database's own guarantee. There is no
//     cache: reads go to the database, so a change committed by another
//     host is seen at once.
//   - Group commit. A commit costs the database one WAL flush; one
//     transaction per send would cap a host at the disk's flush rate. A few
//     committer goroutines each take every Apply waiting at that moment
//     and write them in one transaction (in order), so under load one
//     flush carries many sends. A group without a long run of accepts is
//     one pipelined batch, an implicit transaction
//     committed at its Sync: one round trip. A run of AcceptMessage
//     mutations is one COPY in an explicit transaction (or one multi-row
//     upsert for a few, or when an ID already exists).
//   - In-doubt commits are resolved, never guessed. Each transaction
//     writes a random commit ID into store_commits. When the connection
//     dies after COMMIT was sent, the committer waits until the old
//     backend is gone (terminating it if need be), then looks the ID up on
//     a new connection: present means applied (Apply succeeds), absent
//     means rolled back (the transaction is retried). A transaction that
//     failed before COMMIT was sent is simply retried, within RetryTimeout.
//   - The schema is created and migrated by Open (migrate.go), under an
//     advisory lock so that hosts starting together do not race; a schema
//     newer than this build is refused with ErrSchemaTooNew.
//   - The cluster services (cluster.go: store.Leases, store.Membership,
//     store.Notifier) live in the same database, on the database's clock.
//     ApplyFenced goes through the same group commit: the transaction
//     share-locks the lease rows it depends on (store_fence, first in a
//     pipelined batch) and leaves out (ErrFenced) the Applies whose lease
//     moved on, so a successor's Acquire waits for it and a late write can
//     never land after the successor took over. When a fence fails, the
//     group is redone as an explicit transaction that reads the leases
//     first and writes only the Applies whose lease is current.
//
// Ordering: Applies that are in flight at the same time may commit in
// either order (as with the journal, a caller that needs an order waits
// for the first Apply to return). Two committers' transactions that touch
// the same rows can deadlock; the database aborts one and it is retried.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/takoform/queuehost/runtime/store"
)

// ErrSchemaTooNew: the database was migrated by a newer build.
var ErrSchemaTooNew = errors.New("pgstore: database schema is newer than this build")

// Config configures Open.
type Config struct {
	// URL is the connection string (postgres://user@host:port/db?...).
	URL string
	// MaxConns bounds the connection pool; 0 means the URL's
	// pool_max_conns, or 10.
	MaxConns int32
	// Committers is the number of concurrent group-commit transactions;
	// 0 means 4.
	Committers int
	// MaxGroup bounds the mutations one group commit takes; 0 means 2000.
	MaxGroup int
	// RetryTimeout bounds how long an Apply keeps retrying a transaction
	// that failed for want of a connection (or resolving an in-doubt
	// commit) before it fails with store.ErrUnavailable; 0 means 30s.
	RetryTimeout time.Duration
	Logger       *slog.Logger
}

// Store is a store.Store on PostgreSQL. Safe for concurrent use.
type Store struct {
	cfg    Config
	pool   *pgxpool.Pool
	log    *slog.Logger
	reqs   chan *applyReq
	done   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once
	// commits counts group commits (also for the periodic trim of
	// store_commits), applies the Applies they carried.
	commits atomic.Int64
	applies atomic.Int64
}

// Stats are the store's counters since Open.
type Stats struct {
	// Applies is the number of Apply and ApplyFenced calls committed;
	// Commits the number of transactions that carried them (Applies ÷
	// Commits is the group commit's batching).
	Applies, Commits int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats { return Stats{Applies: s.applies.Load(), Commits: s.commits.Load()} }

var _ store.Store = (*Store)(nil)

// Open connects to the database, creates or migrates its schema, and
// starts the committers. It fails with a specific error when the database
// is unreachable or its schema is newer than this build knows.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.URL == "" {
		return nil, errors.New("pgstore: Config.URL is required")
	}
	if cfg.Committers <= 0 {
		cfg.Committers = 4
	}
	if cfg.MaxGroup <= 0 {
		cfg.MaxGroup = 2000
	}
	if cfg.RetryTimeout <= 0 {
		cfg.RetryTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connection string: %w", err)
	}
	switch {
	case cfg.MaxConns > 0:
		pc.MaxConns = cfg.MaxConns
	case !strings.Contains(cfg.URL, "pool_max_conns"):
		pc.MaxConns = 10
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	// A connection the server terminates while the host starts (it is
	// restarting) is tried again for a moment; a server that cannot be
	// reached at all fails at once.
	var n int
	var pingErr error
	for i := 1; ; i++ {
		if pingErr = pool.Ping(ctx); pingErr != nil {
			err = pingErr
		} else {
			n, err = migrate(ctx, pool)
		}
		var pe *pgconn.PgError
		if err == nil || i == 10 || !errors.As(err, &pe) || !retryableRead(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(i) * 50 * time.Millisecond)
	}
	if pingErr != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: database %s unreachable: %w", redact(pc), pingErr)
	}
	if err != nil {
		pool.Close()
		if errors.Is(err, ErrSchemaTooNew) {
			return nil, err
		}
		return nil, fmt.Errorf("pgstore: migrating the schema: %w", err)
	}
	if n > 0 {
		cfg.Logger.Info("store schema migrated", "applied", n, "version", SchemaVersion())
	}
	s := &Store{cfg: cfg, pool: pool, log: cfg.Logger, reqs: make(chan *applyReq), done: make(chan struct{})}
	for range cfg.Committers {
		s.wg.Go(s.committer)
	}
	return s, nil
}

// redact names the database without its password.
func redact(pc *pgxpool.Config) string {
	c := pc.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

// Pool is the store's connection pool, for the cluster services that share
// it (leases, notifications).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the committers (Applies already taken finish; later ones
// fail with store.ErrClosed) and closes the pool. Closing twice is fine.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.done)
		s.wg.Wait()
		s.pool.Close()
	})
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// readErr maps a failed read: ErrClosed once the store is closed, else
// ErrUnavailable wrapping the cause.
func (s *Store) readErr(err error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

func notFound(kind, id string) error { return fmt.Errorf("%w: %s %q", store.ErrNotFound, kind, id) }

func ts(sec int64, nsec int32) time.Time { return time.Unix(sec, int64(nsec)).UTC() }

const resourceCols = `uid, space, name, form_url, offering, spec, private_inputs, observed, state,
	generation, etag, create_sec, create_nsec, update_sec, update_nsec, exports, creator, paused`

func scanResource(row pgx.Row) (store.Resource, error) {
	var r store.Resource
	var spec, priv, obs []byte
	var cs, us int64
	var cn, un int32
	err := row.Scan(&r.UID, &r.Space, &r.Name, &r.FormURL, &r.Offering, &spec, &priv, &obs, &r.State,
		&r.Generation, &r.ETag, &cs, &cn, &us, &un, &r.Exports, &r.Creator, &r.Paused)
	r.Spec, r.PrivateInputs, r.Observed = spec, priv, obs
	r.CreateTime, r.UpdateTime = ts(cs, cn), ts(us, un)
	return r, err
}

func (s *Store) resourceOnce(ctx context.Context, uid string) (store.Resource, error) {
	if err := s.check(ctx); err != nil {
		return store.Resource{}, err
	}
	r, err := scanResource(s.pool.QueryRow(ctx, `SELECT `+resourceCols+` FROM store_resources WHERE uid = $1`, uid))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Resource{}, notFound("resource", uid)
	}
	if err != nil {
		return store.Resource{}, s.readErr(err)
	}
	return r, nil
}

func (s *Store) resourceByNameOnce(ctx context.Context, space, name string) (store.Resource, error) {
	if err := s.check(ctx); err != nil {
		return store.Resource{}, err
	}
	r, err := scanResource(s.pool.QueryRow(ctx, `SELECT `+resourceCols+` FROM store_resources
		WHERE space = $1 AND name = $2 ORDER BY put_seq DESC LIMIT 1`, space, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Resource{}, notFound("resource", space+"/"+name)
	}
	if err != nil {
		return store.Resource{}, s.readErr(err)
	}
	return r, nil
}

func (s *Store) resourcesOnce(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+resourceCols+` FROM store_resources
		WHERE ($1 = '' OR space = $1) AND ($2 = '' OR form_url = $2)
		ORDER BY create_sec, create_nsec, uid`, space, formURL)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Resource, error) { return scanResource(row) })
	if err != nil {
		return nil, s.readErr(err)
	}
	if out == nil {
		out = []store.Resource{}
	}
	return out, nil
}

var _ store.ResourceLister = (*Store)(nil)

// resourcePageOnce reads one page in the list's order, on the index of
// that order (store_resources_order), so that a page costs its own rows
// whatever the space holds.
func (s *Store) resourcePageOnce(ctx context.Context, q store.ResourceQuery) ([]store.Resource, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	limit := max(q.Limit, 1)
	as, an := q.After.CreateTime.Unix(), int32(q.After.CreateTime.Nanosecond())
	rows, err := s.pool.Query(ctx, `SELECT `+resourceCols+` FROM store_resources
		WHERE space = $1 AND ($2 = '' OR form_url = $2)
		AND ($3 = '' OR (create_sec, create_nsec, uid) > ($4, $5, $3))
		ORDER BY create_sec, create_nsec, uid LIMIT $6`,
		q.Space, q.FormURL, q.After.UID, as, an, limit)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Resource, error) { return scanResource(row) })
	if err != nil {
		return nil, s.readErr(err)
	}
	return out, nil
}

var _ store.ResourceCounter = (*Store)(nil)

// CountResources counts space's resources (on the index that starts with
// space).
func (s *Store) countResourcesOnce(ctx context.Context, space string) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM store_resources WHERE space = $1`, space).Scan(&n); err != nil {
		return 0, s.readErr(err)
	}
	return int(n), nil
}

const operationCols = `id, space, kind, resource_uid, state, effect, error, idempotency_key, principal,
	form_url, intent, create_sec, create_nsec, update_sec, update_nsec, progress`

func scanOperation(row pgx.Row) (store.Operation, error) {
	var o store.Operation
	var perr, intent, progress []byte
	var cs, us int64
	var cn, un int32
	err := row.Scan(&o.ID, &o.Space, &o.Kind, &o.ResourceUID, &o.State, &o.Effect, &perr, &o.IdempotencyKey,
		&o.Principal, &o.FormURL, &intent, &cs, &cn, &us, &un, &progress)
	o.Error, o.Intent, o.Progress = perr, intent, progress
	o.CreateTime, o.UpdateTime = ts(cs, cn), ts(us, un)
	return o, err
}

func (s *Store) operationOnce(ctx context.Context, id string) (store.Operation, error) {
	if err := s.check(ctx); err != nil {
		return store.Operation{}, err
	}
	o, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+operationCols+` FROM store_operations WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Operation{}, notFound("operation", id)
	}
	if err != nil {
		return store.Operation{}, s.readErr(err)
	}
	return o, nil
}

func (s *Store) unfinishedOperationsOnce(ctx context.Context) ([]store.Operation, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+operationCols+` FROM store_operations
		WHERE state NOT IN ('succeeded', 'failed') ORDER BY create_sec, create_nsec, id`)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Operation, error) { return scanOperation(row) })
	if err != nil {
		return nil, s.readErr(err)
	}
	if out == nil {
		out = []store.Operation{}
	}
	return out, nil
}

var _ store.OperationLister = (*Store)(nil)

// operationsOnce is one page of a space's Operations, newest first. The
// table has no index by space: Operations expire after a day, so the scan
// is bounded by a day's changes.
func (s *Store) operationsOnce(ctx context.Context, q store.OperationQuery) ([]store.Operation, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 1 << 30
	}
	bs, bn := q.Before.CreateTime.Unix(), int32(q.Before.CreateTime.Nanosecond())
	rows, err := s.pool.Query(ctx, `SELECT `+operationCols+` FROM store_operations
		WHERE space = $1 AND ($2 = '' OR state = $2) AND ($3 = '' OR resource_uid = $3)
		AND ($4 = '' OR (create_sec, create_nsec, id) < ($5, $6, $4))
		ORDER BY create_sec DESC, create_nsec DESC, id DESC LIMIT $7`,
		q.Space, q.State, q.ResourceUID, q.Before.ID, bs, bn, limit)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Operation, error) { return scanOperation(row) })
	if err != nil {
		return nil, s.readErr(err)
	}
	return out, nil
}

// ExpireRecords removes, in one transaction, the Done Operations last
// updated before cutoff and the idempotency records created before cutoff
// whose Operation is Done and as old, or gone. (Both deletes see the same
// snapshot, so a key's Operation deleted by the first still counts as
// expired for the second.)
func (s *Store) ExpireRecords(ctx context.Context, cutoff time.Time) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.pool.QueryRow(ctx, `WITH ops AS (
			DELETE FROM store_operations
			WHERE state IN ('succeeded', 'failed') AND (update_sec, update_nsec) < ($1, $2)
			RETURNING 1
		), keys AS (
			DELETE FROM store_idempotency i
			WHERE (i.create_sec, i.create_nsec) < ($1, $2) AND NOT EXISTS (
				SELECT 1 FROM store_operations o WHERE o.id = i.operation_id
				AND NOT (o.state IN ('succeeded', 'failed') AND (o.update_sec, o.update_nsec) < ($1, $2)))
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM ops) + (SELECT count(*) FROM keys)`,
		cutoff.Unix(), int32(cutoff.Nanosecond())).Scan(&n)
	if err != nil {
		return 0, s.readErr(err)
	}
	return int(n), nil
}

func (s *Store) idempotencyOnce(ctx context.Context, scope, key string) (store.IdempotencyRecord, error) {
	if err := s.check(ctx); err != nil {
		return store.IdempotencyRecord{}, err
	}
	r := store.IdempotencyRecord{Scope: scope, Key: key}
	var sec int64
	var nsec int32
	err := s.pool.QueryRow(ctx, `SELECT fingerprint, operation_id, create_sec, create_nsec
		FROM store_idempotency WHERE scope = $1 AND key = $2`, []byte(scope), []byte(key)).Scan(&r.Fingerprint, &r.OperationID, &sec, &nsec)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.IdempotencyRecord{}, notFound("idempotency key", key)
	}
	if err != nil {
		return store.IdempotencyRecord{}, s.readErr(err)
	}
	r.CreateTime = ts(sec, nsec)
	return r, nil
}

const messageCols = `queue, id, accepted_at, visible_at, attempts, lease, size, dead_letter, trace_parent, history`

func scanMessage(row pgx.Row) (store.Message, error) {
	var m store.Message
	var attempts, size int32
	var dl, hist []byte
	var tp *string
	err := row.Scan(&m.Queue, &m.ID, &m.AcceptedAt, &m.VisibleAt, &attempts, &m.Lease, &size, &dl, &tp, &hist)
	m.Attempts, m.Size = int(attempts), int(size)
	if tp != nil {
		m.TraceParent = *tp
	}
	if err == nil && dl != nil {
		m.DeadLetter = new(store.DeadLetter)
		if jerr := json.Unmarshal(dl, m.DeadLetter); jerr != nil {
			return m, fmt.Errorf("pgstore: message %s of queue %s: dead_letter: %w", m.ID, m.Queue, jerr)
		}
	}
	if err == nil && hist != nil {
		if jerr := json.Unmarshal(hist, &m.History); jerr != nil {
			return m, fmt.Errorf("pgstore: message %s of queue %s: history: %w", m.ID, m.Queue, jerr)
		}
	}
	return m, err
}

func (s *Store) messagesOnce(ctx context.Context, queue string) ([]store.Message, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+messageCols+` FROM store_messages WHERE queue = $1
		ORDER BY accepted_at, id`, queue)
	if err != nil {
		return nil, s.readErr(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Message, error) { return scanMessage(row) })
	if err != nil {
		return nil, s.readErr(err)
	}
	if out == nil {
		out = []store.Message{}
	}
	return out, nil
}

func (s *Store) messageOnce(ctx context.Context, queue, id string) (store.Message, error) {
	if err := s.check(ctx); err != nil {
		return store.Message{}, err
	}
	m, err := scanMessage(s.pool.QueryRow(ctx, `SELECT `+messageCols+` FROM store_messages WHERE queue = $1 AND id = $2`, queue, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Message{}, notFound("message", id)
	}
	if err != nil {
		return store.Message{}, s.readErr(err)
	}
	return m, nil
}

func (s *Store) messageCountOnce(ctx context.Context, queue string) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM store_messages WHERE queue = $1`, queue).Scan(&n); err != nil {
		return 0, s.readErr(err)
	}
	return int(n), nil
}

func (s *Store) bodiesOnce(ctx context.Context, queue string, ids []string) ([][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, body FROM store_messages WHERE queue = $1 AND id = ANY($2)`, queue, ids)
	if err != nil {
		return nil, s.readErr(err)
	}
	at := make(map[string][]int, len(ids))
	for i, id := range ids {
		at[id] = append(at[id], i)
	}
	var id string
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &body}, func() error {
		for _, i := range at[id] {
			out[i] = append([]byte{}, body...)
		}
		return nil
	})
	if err != nil {
		return nil, s.readErr(err)
	}
	return out, nil
}
