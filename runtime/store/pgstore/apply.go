package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/takoform/queuehost/runtime/store"
)

// applyReq is one Apply waiting for its group commit.
type applyReq struct {
	muts []store.Mutation
	// fence, when set, is the lease that must still be current at commit
	// (ApplyFenced).
	fence *store.Lease
	done  chan error
}

// Apply makes muts durable as one transaction (possibly shared with other
// Applies waiting at the same moment), then returns. On error nothing of
// it was applied.
func (s *Store) Apply(ctx context.Context, muts ...store.Mutation) error {
	return s.apply(ctx, nil, muts)
}

func (s *Store) apply(ctx context.Context, fence *store.Lease, muts []store.Mutation) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	for _, m := range muts {
		switch m.(type) {
		case store.PutResource, store.DeleteResource, store.PutOperation, store.DeleteOperation, store.PutIdempotency, store.DeleteIdempotency,
			store.AcceptMessage, store.DeliverMessages, store.ExtendLease, store.RetryMessage, store.RemoveMessages, store.DropQueue:
		default:
			return fmt.Errorf("pgstore: unknown mutation %T", m)
		}
	}
	if len(muts) == 0 && fence == nil {
		return nil
	}
	r := &applyReq{muts: muts, fence: fence, done: make(chan error, 1)}
	select {
	case s.reqs <- r:
	case <-s.done:
		return store.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Taken by a committer: the outcome is known only when it answers, so
	// wait for it even if ctx ends (an Apply must not return while its
	// transaction may still commit).
	return <-r.done
}

// committer takes one waiting Apply, then every other one already waiting
// (up to MaxGroup mutations), and commits them together.
func (s *Store) committer() {
	for {
		var first *applyReq
		select {
		case <-s.done:
			return
		case first = <-s.reqs:
		}
		group := []*applyReq{first}
		n := len(first.muts)
	more:
		for n < s.cfg.MaxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
				n += len(r.muts)
			default:
				break more
			}
		}
		s.commitGroup(group)
	}
}

// commitGroup commits a group and answers each of its Applies. When the
// group fails for a reason other than the connection (an Apply the
// database refuses), each Apply is retried alone, so that one bad Apply
// does not fail the others.
func (s *Store) commitGroup(group []*applyReq) {
	fenced, err := s.commit(group)
	if err != nil && len(group) > 1 && !isConnErr(err) {
		for _, r := range group {
			f, err := s.commit([]*applyReq{r})
			r.done <- fencedErr(r, err == nil && f[0], err)
		}
		return
	}
	for i, r := range group {
		r.done <- fencedErr(r, err == nil && fenced[i], err)
	}
}

func fencedErr(r *applyReq, fenced bool, err error) error {
	if err == nil && fenced {
		return fmt.Errorf("%w: lease %s epoch %d (holder %s)", store.ErrFenced, r.fence.Name, r.fence.Epoch, r.fence.Holder)
	}
	return err
}

// errInDoubtRolledBack: a commit was in doubt and resolved as not applied.
var errInDoubtRolledBack = errors.New("pgstore: commit in doubt, resolved as rolled back")

// commit runs the group's transaction until it commits, fails for good, or
// RetryTimeout passes. The error it returns wraps store.ErrUnavailable;
// fenced[i] reports that group[i] was left out because its lease had
// moved on.
func (s *Store) commit(group []*applyReq) (fenced []bool, err error) {
	ctx := context.Background()
	deadline := time.Now().Add(s.cfg.RetryTimeout)
	backoff := 10 * time.Millisecond
	pipeline := true
	for attempt := 1; ; attempt++ {
		id := rand.Int64()
		fenced, err := s.tryCommit(ctx, group, id, pipeline)
		if errors.Is(err, errFenceFailed) {
			pipeline = false
			continue
		}
		if err == nil {
			s.applies.Add(int64(len(group)))
			if s.commits.Add(1)%1024 == 0 {
				s.trimCommits(ctx)
			}
			return fenced, nil
		}
		var inDoubt *inDoubtError
		if errors.As(err, &inDoubt) {
			applied, rerr := s.resolve(ctx, id, inDoubt.pid, deadline)
			if rerr != nil {
				return nil, fmt.Errorf("%w: commit outcome unknown: %w (resolving: %w)", store.ErrUnavailable, err, rerr)
			}
			if applied {
				s.log.Warn("pgstore: connection lost during commit; the commit applied", "commit", id)
				return inDoubt.fenced, nil
			}
			s.log.Warn("pgstore: connection lost during commit; it did not apply, retrying", "commit", id)
			err = fmt.Errorf("%w: %w", errInDoubtRolledBack, inDoubt.err)
		}
		retry := isConflict(err) || isConnErr(err) || errors.Is(err, errInDoubtRolledBack)
		if !retry || time.Now().After(deadline) || s.closed.Load() && !isConflict(err) {
			return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		if isConflict(err) {
			continue // the database aborted us for another transaction: at once
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// inDoubtError: COMMIT was sent and no answer came back.
type inDoubtError struct {
	pid    uint32
	fenced []bool
	err    error
}

func (e *inDoubtError) Error() string { return fmt.Sprintf("commit in doubt: %v", e.err) }
func (e *inDoubtError) Unwrap() error { return e.err }

// isConflict: the database aborted the transaction for another one's sake
// (serialization failure, deadlock); it did not apply and may be retried.
func isConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// isConnErr: the transaction failed for want of a connection (not a
// statement the database refused), before COMMIT was sent.
func isConnErr(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The server is shutting down or restarting: admin_shutdown,
		// crash_shutdown, cannot_connect_now.
		return pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var id *inDoubtError
	return !errors.As(err, &id) && err != nil
}

// pipelined reports whether the group can be one pipelined batch in an
// implicit transaction (one round trip, committed at its Sync): too few
// accepts for a COPY (which needs an explicit transaction).
func pipelined(group []*applyReq) bool {
	accepts := 0
	for _, r := range group {
		for _, m := range r.muts {
			if _, ok := m.(store.AcceptMessage); ok {
				accepts++
			}
		}
	}
	return accepts < copyMin
}

// commitErr classifies an error of the statement that commits: refused
// (a PgError) or never sent, the transaction did not apply; otherwise its
// outcome is in doubt.
func commitErr(err error, pid uint32, fenced []bool) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) || pgconn.SafeToRetry(err) {
		return err
	}
	return &inDoubtError{pid: pid, fenced: fenced, err: err}
}

// errFenceFailed: a pipelined batch's fence check failed; which of the
// group's Applies are fenced is worked out in an explicit transaction.
var errFenceFailed = errors.New("pgstore: a fence of the batch failed")

func (s *Store) tryCommit(ctx context.Context, group []*applyReq, id int64, allowPipeline bool) (fenced []bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	if allowPipeline && pipelined(group) {
		// Every statement and the commit ID in one batch: the server runs
		// them as one implicit transaction, committed at the batch's Sync.
		// The fences come first: one that is not current aborts it all.
		w := writer{}
		for _, f := range fenceOrder(group) {
			w.b.Queue(`SELECT store_fence($1, $2, $3)`, f.Name, f.Holder, f.Epoch)
		}
		for _, r := range group {
			for _, m := range r.muts {
				if err := w.add(ctx, m); err != nil {
					return nil, err
				}
			}
		}
		if err := w.flushAccepts(ctx); err != nil {
			return nil, err
		}
		w.b.Queue(`INSERT INTO store_commits (id) VALUES ($1)`, id)
		fenced = make([]bool, len(group))
		if err := conn.SendBatch(ctx, &w.b).Close(); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "TF001" {
				return nil, fmt.Errorf("%w: %w", errFenceFailed, err)
			}
			return nil, commitErr(err, pid, fenced)
		}
		return fenced, nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tx.Rollback(ctx)
		}
	}()
	if fenced, err = checkFences(ctx, tx, group); err != nil {
		return nil, err
	}
	w := writer{tx: tx}
	for i, r := range group {
		if fenced[i] {
			continue
		}
		for _, m := range r.muts {
			if err := w.add(ctx, m); err != nil {
				return nil, err
			}
		}
	}
	if err := w.flushAccepts(ctx); err != nil {
		return nil, err
	}
	w.b.Queue(`INSERT INTO store_commits (id) VALUES ($1)`, id)
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, commitErr(err, pid, fenced)
	}
	return fenced, nil
}

// fenceOrder is the distinct leases the group's Applies are fenced with,
// in name order: the order in which every statement that locks several
// lease rows locks them (cluster.go), so that a group commit and a
// renewal (RenewAll) never wait for each other in a cycle. In the order
// the Applies arrived, two of them fenced with leases a and b could
// share-lock b while a renewal held a and waited for b: a deadlock.
func fenceOrder(group []*applyReq) []store.Lease {
	var fs []store.Lease
	seen := map[store.Lease]bool{}
	for _, r := range group {
		if f := r.fence; f != nil && !seen[*f] {
			seen[*f] = true
			fs = append(fs, *f)
		}
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].Name != fs[j].Name {
			return fs[i].Name < fs[j].Name
		}
		return fs[i].Epoch < fs[j].Epoch
	})
	return fs
}

// checkFences reads the leases the group's fenced Applies name, share-
// locking their rows until the transaction ends: a successor's Acquire
// (an UPDATE of the row) waits for this commit, so a write that passed
// the check cannot land after the successor took over. fenced[i] is true
// when group[i]'s lease is no longer current (another holder or epoch, or
// expired by the database's clock).
func checkFences(ctx context.Context, tx pgx.Tx, group []*applyReq) ([]bool, error) {
	fenced := make([]bool, len(group))
	var names []string
	for _, r := range group {
		if r.fence != nil {
			names = append(names, r.fence.Name)
		}
	}
	if len(names) == 0 {
		return fenced, nil
	}
	type cur struct {
		holder string
		epoch  int64
	}
	current := map[string]cur{}
	rows, err := tx.Query(ctx, `SELECT name, holder, epoch FROM store_leases
		WHERE name = ANY($1) AND expires > now() ORDER BY name FOR SHARE`, names)
	if err != nil {
		return nil, err
	}
	var name string
	var c cur
	if _, err := pgx.ForEachRow(rows, []any{&name, &c.holder, &c.epoch}, func() error {
		current[name] = c
		return nil
	}); err != nil {
		return nil, err
	}
	for i, r := range group {
		if r.fence != nil {
			fenced[i] = current[r.fence.Name] != cur{r.fence.Holder, r.fence.Epoch}
		}
	}
	return fenced, nil
}

// resolve finds out whether commit id applied after its connection (to
// backend pid) was lost during COMMIT: once that backend is gone, its
// transaction has either committed or rolled back for good, and the
// store_commits row says which.
func (s *Store) resolve(ctx context.Context, id int64, pid uint32, deadline time.Time) (applied bool, err error) {
	backoff := 20 * time.Millisecond
	for {
		applied, err = s.resolveOnce(ctx, id, pid)
		if err == nil || time.Now().After(deadline) {
			return applied, err
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

func (s *Store) resolveOnce(ctx context.Context, id int64, pid uint32) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	for i := 0; ; i++ {
		var alive bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, int32(pid)).Scan(&alive); err != nil {
			return false, err
		}
		if !alive {
			break
		}
		if i == 10 {
			// Still there after ~0.5s: it is stuck (or waiting on a lock
			// with our transaction open). End it; its transaction then
			// rolls back unless it already committed.
			if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)); err != nil {
				return false, err
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	var applied bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM store_commits WHERE id = $1)`, id).Scan(&applied)
	return applied, err
}

// trimCommits deletes commit IDs old enough that no resolution can still
// ask for them.
func (s *Store) trimCommits(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM store_commits WHERE at < now() - $1::interval`,
		fmt.Sprintf("%d seconds", int(10*s.cfg.RetryTimeout.Seconds())+60)); err != nil {
		s.log.Warn("pgstore: trimming store_commits", "err", err)
	}
}

// copyMin is the length of a run of AcceptMessage from which the writer
// uses COPY rather than a multi-row upsert.
const copyMin = 16

// writer turns mutations into statements of one transaction, in order:
// statements are queued in a pipelined batch, and a run of AcceptMessage
// becomes one bulk insert.
type writer struct {
	tx      pgx.Tx
	b       pgx.Batch
	accepts []store.AcceptMessage
}

func (w *writer) add(ctx context.Context, m store.Mutation) error {
	if a, ok := m.(store.AcceptMessage); ok {
		w.accepts = append(w.accepts, a)
		return nil
	}
	if err := w.flushAccepts(ctx); err != nil {
		return err
	}
	b := &w.b
	switch m := m.(type) {
	case store.PutResource:
		r := &m.Resource
		b.Queue(`INSERT INTO store_resources (`+resourceCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
			ON CONFLICT (uid) DO UPDATE SET space = EXCLUDED.space, name = EXCLUDED.name,
				form_url = EXCLUDED.form_url, offering = EXCLUDED.offering, spec = EXCLUDED.spec,
				private_inputs = EXCLUDED.private_inputs, observed = EXCLUDED.observed,
				state = EXCLUDED.state, generation = EXCLUDED.generation, etag = EXCLUDED.etag,
				create_sec = EXCLUDED.create_sec, create_nsec = EXCLUDED.create_nsec,
				update_sec = EXCLUDED.update_sec, update_nsec = EXCLUDED.update_nsec,
				exports = EXCLUDED.exports, creator = EXCLUDED.creator, paused = EXCLUDED.paused, put_seq = EXCLUDED.put_seq`,
			r.UID, r.Space, r.Name, r.FormURL, r.Offering, []byte(r.Spec), []byte(r.PrivateInputs), []byte(r.Observed),
			r.State, r.Generation, r.ETag, r.CreateTime.Unix(), int32(r.CreateTime.Nanosecond()),
			r.UpdateTime.Unix(), int32(r.UpdateTime.Nanosecond()), r.Exports, r.Creator, r.Paused)
	case store.DeleteResource:
		b.Queue(`DELETE FROM store_resources WHERE uid = $1`, m.UID)
	case store.PutOperation:
		o := &m.Operation
		intent := []byte(o.Intent)
		if o.Done() {
			intent = nil // nothing needs it once the outcome is recorded
		}
		b.Queue(`INSERT INTO store_operations (`+operationCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
			ON CONFLICT (id) DO UPDATE SET space = EXCLUDED.space, kind = EXCLUDED.kind,
				resource_uid = EXCLUDED.resource_uid, state = EXCLUDED.state, effect = EXCLUDED.effect,
				error = EXCLUDED.error, idempotency_key = EXCLUDED.idempotency_key,
				principal = EXCLUDED.principal, form_url = EXCLUDED.form_url, intent = EXCLUDED.intent,
				create_sec = EXCLUDED.create_sec, create_nsec = EXCLUDED.create_nsec,
				update_sec = EXCLUDED.update_sec, update_nsec = EXCLUDED.update_nsec, progress = EXCLUDED.progress`,
			o.ID, o.Space, o.Kind, o.ResourceUID, o.State, o.Effect, []byte(o.Error), o.IdempotencyKey, o.Principal,
			o.FormURL, intent, o.CreateTime.Unix(), int32(o.CreateTime.Nanosecond()),
			o.UpdateTime.Unix(), int32(o.UpdateTime.Nanosecond()), []byte(o.Progress))
	case store.DeleteOperation:
		b.Queue(`DELETE FROM store_operations WHERE id = $1`, m.ID)
	case store.PutIdempotency:
		r := &m.Record
		b.Queue(`INSERT INTO store_idempotency (scope, key, fingerprint, operation_id, create_sec, create_nsec)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
				operation_id = EXCLUDED.operation_id, create_sec = EXCLUDED.create_sec, create_nsec = EXCLUDED.create_nsec`,
			[]byte(r.Scope), []byte(r.Key), r.Fingerprint, r.OperationID, r.CreateTime.Unix(), int32(r.CreateTime.Nanosecond()))
	case store.DeleteIdempotency:
		b.Queue(`DELETE FROM store_idempotency WHERE scope = $1 AND key = $2`, []byte(m.Scope), []byte(m.Key))
	case store.DeliverMessages:
		if m.VisibleAt != 0 {
			b.Queue(`UPDATE store_messages SET attempts = attempts + 1, lease = $3, visible_at = $4 WHERE queue = $1 AND id = ANY($2)`,
				m.Queue, m.IDs, m.Batch, m.VisibleAt)
		} else {
			b.Queue(`UPDATE store_messages SET attempts = attempts + 1, lease = $3 WHERE queue = $1 AND id = ANY($2)`,
				m.Queue, m.IDs, m.Batch)
		}
	case store.ExtendLease:
		b.Queue(`UPDATE store_messages SET visible_at = $4 WHERE queue = $1 AND id = ANY($2) AND lease = $3`,
			m.Queue, m.IDs, m.Lease, m.VisibleAt)
	case store.RetryMessage:
		if m.Attempt == nil {
			b.Queue(`UPDATE store_messages SET lease = '', visible_at = $3 WHERE queue = $1 AND id = $2`,
				m.Queue, m.ID, m.VisibleAt)
			break
		}
		// The attempt is appended and the newest MaxAttempts kept, as
		// store.AppendAttempt does.
		a, _ := json.Marshal(store.TrimAttempt(*m.Attempt))
		b.Queue(`UPDATE store_messages SET lease = '', visible_at = $3,
			history = (SELECT jsonb_agg(x ORDER BY n) FROM (
				SELECT x, n FROM jsonb_array_elements(coalesce(history, '[]'::jsonb) || jsonb_build_array($4::jsonb)) WITH ORDINALITY AS t(x, n)
				ORDER BY n DESC LIMIT $5) AS newest)
			WHERE queue = $1 AND id = $2`,
			m.Queue, m.ID, m.VisibleAt, string(a), store.MaxAttempts)
	case store.RemoveMessages:
		b.Queue(`DELETE FROM store_messages WHERE queue = $1 AND id = ANY($2)`, m.Queue, m.IDs)
	case store.DropQueue:
		b.Queue(`DELETE FROM store_messages WHERE queue = $1`, m.Queue)
	default:
		return fmt.Errorf("pgstore: unknown mutation %T", m)
	}
	return nil
}

// flushAccepts writes the pending run of AcceptMessage. A later accept of
// the same ID replaces an earlier one, as in the state machine. A long run
// is COPYed under a savepoint; if an ID already exists (a replacement) the
// copy is rolled back and the run is upserted instead.
func (w *writer) flushAccepts(ctx context.Context) error {
	run := w.accepts
	if len(run) == 0 {
		return nil
	}
	w.accepts = nil
	type key struct{ q, id string }
	last := make(map[key]int, len(run))
	for i, a := range run {
		last[key{a.Message.Queue, a.Message.ID}] = i
	}
	if len(last) < len(run) {
		dedup := run[:0:0]
		for i, a := range run {
			if last[key{a.Message.Queue, a.Message.ID}] == i {
				dedup = append(dedup, a)
			}
		}
		run = dedup
	}
	if len(run) >= copyMin {
		if err := w.flush(ctx); err != nil {
			return err
		}
		ok, err := w.copyRun(ctx, run)
		if ok || err != nil {
			return err
		}
	}
	n := len(run)
	queues, ids, lease := make([]string, n), make([]string, n), make([]string, n)
	acc, vis := make([]int64, n), make([]int64, n)
	att, size := make([]int32, n), make([]int32, n)
	bodies := make([][]byte, n)
	dls, tps, hist := make([]*string, n), make([]*string, n), make([]*string, n)
	for i, a := range run {
		m := &a.Message
		queues[i], ids[i], lease[i] = m.Queue, m.ID, m.Lease
		acc[i], vis[i], att[i], size[i], bodies[i] = m.AcceptedAt, m.VisibleAt, int32(m.Attempts), int32(len(a.Body)), a.Body
		dls[i], tps[i], hist[i] = deadLetterJSON(m.DeadLetter), traceParent(m.TraceParent), historyJSON(m.History)
	}
	w.b.Queue(`INSERT INTO store_messages (queue, id, accepted_at, visible_at, attempts, lease, size, body, dead_letter, trace_parent, history)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::integer[], $6::text[], $7::integer[], $8::bytea[], $9::text[]::jsonb[], $10::text[], $11::text[]::jsonb[])
		ON CONFLICT (queue, id) DO UPDATE SET accepted_at = EXCLUDED.accepted_at, visible_at = EXCLUDED.visible_at,
			attempts = EXCLUDED.attempts, lease = EXCLUDED.lease, size = EXCLUDED.size, body = EXCLUDED.body,
			dead_letter = EXCLUDED.dead_letter, trace_parent = EXCLUDED.trace_parent, history = EXCLUDED.history`,
		queues, ids, acc, vis, att, lease, size, bodies, dls, tps, hist)
	return nil
}

var messageColumns = []string{"queue", "id", "accepted_at", "visible_at", "attempts", "lease", "size", "body", "dead_letter", "trace_parent", "history"}

// traceParent is the trace_parent column of a message: NULL when it has
// none (a host that does not trace).
func traceParent(tp string) *string {
	if tp == "" {
		return nil
	}
	return &tp
}

// historyJSON is the history column of a message: its attempt history,
// bounded as the state machine bounds it, as JSON, or NULL.
func historyJSON(h []store.Attempt) *string {
	if len(h) == 0 {
		return nil
	}
	if len(h) > store.MaxAttempts {
		h = h[len(h)-store.MaxAttempts:]
	}
	out := make([]store.Attempt, len(h))
	for i, a := range h {
		out[i] = store.TrimAttempt(a)
	}
	b, _ := json.Marshal(out)
	s := string(b)
	return &s
}

// deadLetterJSON is the dead_letter column of a message: its metadata as
// JSON, or NULL.
func deadLetterJSON(dl *store.DeadLetter) *string {
	if dl == nil {
		return nil
	}
	b, _ := json.Marshal(dl)
	s := string(b)
	return &s
}

// copyRun COPYs run into store_messages. ok is false when an ID already
// existed: the copy was rolled back to its savepoint and nothing of it
// applied.
func (w *writer) copyRun(ctx context.Context, run []store.AcceptMessage) (ok bool, err error) {
	sp, err := w.tx.Begin(ctx) // a savepoint
	if err != nil {
		return false, err
	}
	i := 0
	_, err = sp.CopyFrom(ctx, pgx.Identifier{"store_messages"}, messageColumns, pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(run) {
			return nil, nil
		}
		a := &run[i]
		i++
		m := &a.Message
		return []any{m.Queue, m.ID, m.AcceptedAt, m.VisibleAt, int32(m.Attempts), m.Lease, int32(len(a.Body)), a.Body, deadLetterJSON(m.DeadLetter), traceParent(m.TraceParent), historyJSON(m.History)}, nil
	}))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation: a replacement
		return false, sp.Rollback(ctx)
	}
	if err != nil {
		sp.Rollback(ctx)
		return false, err
	}
	return true, sp.Commit(ctx)
}

// flush sends the queued statements (and the pending accepts) as one
// pipelined batch.
func (w *writer) flush(ctx context.Context) error {
	if w.b.Len() == 0 {
		return nil
	}
	b := w.b
	w.b = pgx.Batch{}
	return w.tx.SendBatch(ctx, &b).Close()
}
