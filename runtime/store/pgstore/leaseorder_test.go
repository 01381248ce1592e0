package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

// waitLocked waits until a backend of the database waits for a lock
// (the statement under test has reached its lock wait).
func waitLocked(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement waits for a lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRenewAllLocksInNameOrder (issue #35, defect 3): a fenced group
// commit share-locks its leases' rows in name order; a renewal of the
// same rows must take them in that order too. Here a transaction holds
// lease a as a fence does and then takes b: with RenewAll locking b first
// (the order it was given, the rows' physical order) the two deadlocked
// and PostgreSQL aborted one ("deadlock detected").
func TestRenewAllLocksInNameOrder(t *testing.T) {
	url := pgtest.Database(t)
	s := open(t, url)
	defer s.Close()
	ctx := context.Background()
	lb, err := s.Acquire(ctx, "queue/b", "h", ttl)
	if err != nil {
		t.Fatal(err)
	}
	la, err := s.Acquire(ctx, "queue/a", "h", ttl)
	if err != nil {
		t.Fatal(err)
	}
	fence, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer fence.Close(ctx)
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	tx, err := fence.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT store_fence('queue/a', 'h', $1)`, la.Epoch); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ls  []store.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		ls, err := s.RenewAll(ctx, []store.Lease{lb, la}, ttl)
		done <- result{ls, err}
	}()
	waitLocked(t, watch)
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := tx.Exec(lctx, `SELECT store_fence('queue/b', 'h', $1)`, lb.Epoch); err != nil {
		t.Fatalf("the fence's second lease: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.ls) != 2 {
		t.Fatalf("RenewAll = %v, %v; want both leases renewed", r.ls, r.err)
	}
}

// TestRenewalUsesTheClockOfTheWrite (issue #35, defect 3): a renewal that
// waited for a row lock extends the lease from the time of its write, not
// from the start of its statement (now()), which would shorten it by the
// wait.
func TestRenewalUsesTheClockOfTheWrite(t *testing.T) {
	url := pgtest.Database(t)
	s := open(t, url)
	defer s.Close()
	ctx := context.Background()
	l, err := s.Acquire(ctx, "queue/q", "h", ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, renew := range []struct {
		name string
		f    func() (time.Time, error)
	}{
		{"Renew", func() (time.Time, error) { n, err := s.Renew(ctx, l, ttl); return n.Expires, err }},
		{"RenewAll", func() (time.Time, error) {
			ns, err := s.RenewAll(ctx, []store.Lease{l}, ttl)
			if len(ns) != 1 {
				return time.Time{}, err
			}
			return ns[0].Expires, err
		}},
	} {
		t.Run(renew.name, func(t *testing.T) {
			lock, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close(ctx)
			tx, err := lock.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT store_fence('queue/q', 'h', $1)`, l.Epoch); err != nil {
				t.Fatal(err)
			}
			type result struct {
				exp time.Time
				err error
			}
			done := make(chan result, 1)
			go func() {
				exp, err := renew.f()
				done <- result{exp, err}
			}()
			waitLocked(t, lock)                // any connection of the database sees it
			time.Sleep(300 * time.Millisecond) // the wait the lease must not lose
			var released time.Time
			if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&released); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.exp.Before(released.Add(ttl)) {
				t.Fatalf("renewed until %v, before the write's time %v + ttl: shortened by %v", r.exp, released, released.Add(ttl).Sub(r.exp))
			}
		})
	}
}
