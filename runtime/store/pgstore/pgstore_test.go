package pgstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/runtime/store/storetest"
)

// dbs maps the suite's directories to databases: reopening a directory
// reopens its database.
type dbs struct {
	mu sync.Mutex
	m  map[string]string
}

func (d *dbs) url(t *testing.T, dir string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u, ok := d.m[dir]; ok {
		return u
	}
	u := pgtest.Database(t)
	d.m[dir] = u
	return u
}

func open(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, MaxConns: 4, Committers: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStore(t *testing.T) {
	pgtest.Require(t)
	d := &dbs{m: map[string]string{}}
	var cur string // the database of the running subtest (the suite runs them in order)
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		cur = d.url(t, dir)
		return open(t, cur)
	}, storetest.WithFault(func(t *testing.T, on bool) { pgtest.Fault(t, cur, on) }))
}
