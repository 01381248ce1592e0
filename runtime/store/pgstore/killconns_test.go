package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

// What a restart of PostgreSQL does to a running store, without restarting
// the shared server: every connection of the database is terminated,
// several times, while writers apply. Every Apply either succeeds or fails
// with ErrUnavailable, and the database then holds exactly the messages
// whose Apply succeeded, each once, with the attempts of the deliveries
// that succeeded: nothing lost, nothing applied twice.
func TestConnectionsKilledUnderLoad(t *testing.T) {
	dbURL := pgtest.Database(t)
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: dbURL, MaxConns: 6, Committers: 3, RetryTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const writers = 6
	var ok, failed atomic.Int64
	var mu sync.Mutex
	accepted := map[string]int{} // message -> deliveries that succeeded
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				err := s.Apply(ctx, store.AcceptMessage{Message: store.Message{Queue: "q", ID: id, Size: 1}, Body: []byte("x")})
				if err != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				mu.Lock()
				accepted[id] = 0
				mu.Unlock()
				if err := s.Apply(ctx, store.DeliverMessages{Queue: "q", Batch: "b", IDs: []string{id}}); err == nil {
					mu.Lock()
					accepted[id]++
					mu.Unlock()
				}
			}
		})
	}
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	killed := 0
	// Readers beside the writers: a read never fails for a terminated
	// connection (it is retried on another).
	var reads, readErrs atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.MessageCount(ctx, "q"); err != nil {
					readErrs.Add(1)
					t.Errorf("a read failed across terminated connections: %v", err)
					return
				}
				reads.Add(1)
			}
		})
	}
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()) k`, dbName(t, dbURL)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
	}
	if killed == 0 {
		t.Fatal("no connection of the store was terminated: the test exercised nothing")
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if ok.Load() == 0 {
		t.Fatal("no Apply succeeded")
	}
	ms, err := s.Messages(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range ms {
		got[m.ID] = m.Attempts
	}
	for id, n := range accepted {
		a, present := got[id]
		if !present {
			t.Errorf("message %s was accepted (Apply returned nil) but is not in the database", id)
			continue
		}
		// A delivery whose Apply failed applied nothing: attempts is
		// exactly the number of successful deliveries.
		if a != n {
			t.Errorf("message %s has attempts %d, want %d (the successful deliveries)", id, a, n)
		}
	}
	for id := range got {
		if _, ok := accepted[id]; !ok {
			t.Errorf("message %s is in the database, but its Apply failed", id)
		}
	}
	t.Logf("%d Applies succeeded, %d failed with ErrUnavailable, %d reads; %d connections terminated in 5 rounds", ok.Load(), failed.Load(), reads.Load(), killed)
}

func dbName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}
