package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

const ttl = time.Hour // leases in these tests expire only when a test says so

// expire ends a lease (or a member's heartbeat) by the database's clock,
// as the passing of its ttl would, without waiting.
func expire(t *testing.T, url, table, key, name string) {
	t.Helper()
	pgtest.Exec(t, url, "UPDATE "+table+" SET expires = now() - interval '1 second' WHERE "+key+" = $1", name)
}

func accept(q, id string) store.AcceptMessage {
	return store.AcceptMessage{Message: store.Message{Queue: q, ID: id, Size: 1}, Body: []byte("x")}
}

func TestLeaseLifecycle(t *testing.T) {
	url := pgtest.Database(t)
	a, b := open(t, url), open(t, url) // two hosts
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	la, err := a.Acquire(ctx, "queue/q", "host-a", ttl)
	if err != nil || la.Epoch != 1 || la.Holder != "host-a" {
		t.Fatalf("first Acquire = %+v, %v; want epoch 1 for host-a", la, err)
	}
	if _, err := b.Acquire(ctx, "queue/q", "host-b", ttl); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("Acquire of a held lease = %v, want ErrLeaseHeld", err)
	}
	again, err := a.Acquire(ctx, "queue/q", "host-a", ttl)
	if err != nil || again.Epoch != 1 {
		t.Fatalf("re-Acquire by the holder = %+v, %v; want the same epoch", again, err)
	}
	if r, err := a.Renew(ctx, la, ttl); err != nil || r.Epoch != 1 || !r.Expires.After(time.Now().Add(ttl/2)) {
		t.Fatalf("Renew = %+v, %v", r, err)
	}

	// The lease expires; host-b takes it with a higher epoch, and host-a
	// can neither renew it nor write with it.
	expire(t, url, "store_leases", "name", "queue/q")
	lb, err := b.Acquire(ctx, "queue/q", "host-b", ttl)
	if err != nil || lb.Epoch != 2 {
		t.Fatalf("Acquire after expiry = %+v, %v; want epoch 2", lb, err)
	}
	if _, err := a.Renew(ctx, la, ttl); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Renew of a lost lease = %v, want ErrFenced", err)
	}

	// Released, it is free for anyone, and the epoch still goes up; the
	// release is announced to whoever waits for it.
	released := make(chan string, 4)
	stop, err := a.Listen(ctx, pgstore.ReleasedChannel, func(name string) { released <- name })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := b.Release(ctx, lb); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-released:
		if name != "queue/q" {
			t.Fatalf("release announced %q, want queue/q", name)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the release was not announced")
	}
	lc, err := a.Acquire(ctx, "queue/q", "host-a", ttl)
	if err != nil || lc.Epoch != 3 {
		t.Fatalf("Acquire after Release = %+v, %v; want epoch 3", lc, err)
	}
	// Releasing a lease that moved on changes nothing.
	if err := b.Release(ctx, lb); err != nil {
		t.Fatal(err)
	}
	ls, err := b.LeaseList(ctx)
	if err != nil || len(ls) != 1 || ls[0].Holder != "host-a" || ls[0].Epoch != 3 {
		t.Fatalf("LeaseList = %+v, %v", ls, err)
	}
}

// A host that lost its lease (paused past it) cannot write with it: its
// fenced Apply fails with ErrFenced and applies nothing, while unfenced
// Applies committed in the same moment are not affected.
func TestApplyFenced(t *testing.T) {
	url := pgtest.Database(t)
	a, b := open(t, url), open(t, url)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	la, err := a.Acquire(ctx, "queue/q", "host-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ApplyFenced(ctx, la, accept("q", "by-a")); err != nil {
		t.Fatalf("ApplyFenced with the current lease: %v", err)
	}
	expire(t, url, "store_leases", "name", "queue/q")
	if err := a.ApplyFenced(ctx, la, accept("q", "late")); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("ApplyFenced with an expired lease = %v, want ErrFenced", err)
	}
	lb, err := b.Acquire(ctx, "queue/q", "host-b", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Many stale and unfenced writes at once: the committers group them.
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			id := string(rune('A' + i))
			if i%2 == 0 {
				errs[i] = a.ApplyFenced(ctx, la, accept("q", "stale-"+id))
			} else {
				errs[i] = a.Apply(ctx, accept("other", id))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && !errors.Is(err, store.ErrFenced) {
			t.Fatalf("stale ApplyFenced %d = %v, want ErrFenced", i, err)
		}
		if i%2 == 1 && err != nil {
			t.Fatalf("unfenced Apply %d beside stale fenced ones = %v", i, err)
		}
	}
	if err := b.ApplyFenced(ctx, lb, accept("q", "by-b")); err != nil {
		t.Fatalf("the successor's ApplyFenced: %v", err)
	}
	ms, err := b.Messages(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	if len(ids) != 2 || ids[0] != "by-a" || ids[1] != "by-b" {
		t.Fatalf("queue q holds %v; want only by-a and by-b (no fenced write applied)", ids)
	}
	if n, _ := b.MessageCount(ctx, "other"); n != 20 {
		t.Fatalf("queue other holds %d, want the 20 unfenced writes", n)
	}
}

func TestMembership(t *testing.T) {
	url := pgtest.Database(t)
	s := open(t, url)
	defer s.Close()
	ctx := context.Background()
	for _, id := range []string{"h2", "h1", "h3"} {
		if err := s.Heartbeat(ctx, store.Member{ID: id, Addr: id + ":8787"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		ms, err := s.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	if got := ids(); len(got) != 3 || got[0] != "h1" || got[2] != "h3" {
		t.Fatalf("Members = %v", got)
	}
	expire(t, url, "store_members", "id", "h2") // h2 stopped heartbeating
	if err := s.Leave(ctx, "h3"); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 1 || got[0] != "h1" {
		t.Fatalf("Members after an expiry and a Leave = %v, want [h1]", got)
	}
	if err := s.Heartbeat(ctx, store.Member{ID: "h2"}, ttl); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("Members after h2 came back = %v", got)
	}
}

// A notification from one host reaches a listener on another; after the
// listener's connection is killed it reconnects, says so with an empty
// payload, and receives again.
func TestNotifyListen(t *testing.T) {
	url := pgtest.Database(t)
	a, b := open(t, url), open(t, url)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	got := make(chan string, 16)
	stop, err := b.Listen(ctx, "queue_q", func(p string) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	wait := func(want string) {
		t.Helper()
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("notification %q, want %q", p, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no notification %q", want)
		}
	}
	if err := a.Notify(ctx, "queue_q", "m1"); err != nil {
		t.Fatal(err)
	}
	wait("m1")
	pgtest.Exec(t, url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`)
	wait("") // reconnected: re-read the store
	if err := a.Notify(ctx, "queue_q", "m2"); err != nil {
		t.Fatal(err)
	}
	wait("m2")
}
