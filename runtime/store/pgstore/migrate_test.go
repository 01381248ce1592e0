package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

// Hosts starting together on an empty database: the advisory lock makes
// one migrate and the others find the schema there; all of them work.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	url := pgtest.Database(t)
	const n = 4
	stores := make([]*pgstore.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			stores[i], errs[i] = pgstore.Open(context.Background(), pgstore.Config{URL: url, MaxConns: 2, Committers: 1})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	for i, s := range stores {
		m := store.AcceptMessage{Message: store.Message{Queue: "q", ID: string(rune('a' + i)), Size: 1}, Body: []byte("x")}
		if err := s.Apply(context.Background(), m); err != nil {
			t.Fatalf("Apply on store %d: %v", i, err)
		}
	}
	if c, _ := stores[0].MessageCount(context.Background(), "q"); c != n {
		t.Fatalf("MessageCount = %d, want %d (every host sees every write)", c, n)
	}
	var versions int
	s := stores[0]
	if err := s.Pool().QueryRow(context.Background(), "SELECT count(*) FROM store_schema").Scan(&versions); err != nil || versions != pgstore.SchemaVersion() {
		t.Fatalf("store_schema rows = %d, %v; want %d", versions, err, pgstore.SchemaVersion())
	}
}

func TestSchemaNewerThanBuildIsRefused(t *testing.T) {
	url := pgtest.Database(t)
	s := open(t, url)
	s.Close()
	pgtest.Exec(t, url, "INSERT INTO store_schema (version, name) VALUES ($1, 'from_the_future.sql')", pgstore.SchemaVersion()+1)
	_, err := pgstore.Open(context.Background(), pgstore.Config{URL: url})
	if !errors.Is(err, pgstore.ErrSchemaTooNew) || !strings.Contains(err.Error(), "upgrade the host") {
		t.Fatalf("Open on a newer schema = %v, want ErrSchemaTooNew saying what to do", err)
	}
}

func TestUnreachableDatabaseIsAClearError(t *testing.T) {
	// Port 1 on loopback: nothing listens there.
	_, err := pgstore.Open(context.Background(), pgstore.Config{URL: "postgres://nobody:secret@127.0.0.1:1/nowhere?connect_timeout=2"})
	if err == nil || !strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Open on an unreachable database = %v, want an error saying unreachable, without the password", err)
	}
	if _, err := pgstore.Open(context.Background(), pgstore.Config{URL: "mysql://x"}); err == nil {
		t.Fatal("Open with a bad connection string succeeded")
	}
}
