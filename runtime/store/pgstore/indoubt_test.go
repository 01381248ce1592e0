package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

// cutProxy sits between the store and PostgreSQL and, once armed, cuts
// the connection that sends the message that commits (match: COMMIT for an
// explicit transaction, the Sync that ends a pipelined batch): either
// before the server sees it (the transaction rolls back) or after (it
// commits), and in both cases before the client hears the answer. To the
// client both look the same: a commit in doubt.
type cutProxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32 // 0 off, 1 cut before COMMIT reaches the server, 2 after
	cuts   atomic.Int32
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
	match  []byte
}

var (
	matchCommit = []byte("commit\x00")
	matchSync   = []byte{'S', 0, 0, 0, 4}
)

const (
	cutBefore = 1
	cutAfter  = 2
)

func newCutProxy(t *testing.T, dbURL string) (*cutProxy, string) {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: u.Host, match: matchCommit}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var cut atomic.Bool
		p.wg.Go(func() { // server → client, until cut
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !cut.Load() {
					c.Write(buf[:n])
				}
				if err != nil {
					c.Close()
					return
				}
			}
		})
		p.wg.Go(func() { // client → server, watching for COMMIT
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					chunk := buf[:n]
					if m := p.mode.Load(); m != 0 && bytes.Contains(chunk, p.match) && p.mode.CompareAndSwap(m, 0) {
						cut.Store(true)
						c.Close()
						if m == cutAfter {
							s.Write(chunk)
							time.Sleep(200 * time.Millisecond) // the server commits; its answer is dropped
						}
						p.cuts.Add(1)
						return
					}
					if _, err := s.Write(chunk); err != nil {
						return
					}
				}
				if err != nil {
					if err != io.EOF {
						c.Close()
					}
					return
				}
			}
		})
	}
}

// An in-doubt commit is resolved, never guessed: a DeliverMessages whose
// commit was cut counts exactly one attempt whether the server committed
// it (Apply learns it applied) or not (Apply retries it), on both commit
// paths: a pipelined batch (committed at its Sync; fenced or not) and an
// explicit transaction (a COPY of many accepts, committed by COMMIT).
func TestInDoubtCommitIsResolved(t *testing.T) {
	dbURL := pgtest.Database(t)
	for _, tc := range []struct {
		name         string
		mode         int32
		fenced, bulk bool
	}{
		{"pipelined, cut before the server commits", cutBefore, false, false},
		{"pipelined, cut after the server commits", cutAfter, false, false},
		{"pipelined and fenced, cut before the server commits", cutBefore, true, false},
		{"pipelined and fenced, cut after the server commits", cutAfter, true, false},
		{"transaction, cut before the server commits", cutBefore, false, true},
		{"transaction, cut after the server commits", cutAfter, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, via := newCutProxy(t, dbURL)
			if !tc.bulk {
				p.match = matchSync
			}
			s, err := pgstore.Open(context.Background(), pgstore.Config{URL: via, MaxConns: 2, Committers: 1, RetryTimeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			q := "q-" + tc.name
			lease, err := s.Acquire(ctx, "queue/"+q, "me", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			apply := func(muts ...store.Mutation) error {
				if tc.fenced {
					return s.ApplyFenced(ctx, lease, muts...)
				}
				return s.Apply(ctx, muts...)
			}
			accept := func(id string) store.AcceptMessage {
				return store.AcceptMessage{Message: store.Message{Queue: q, ID: id, Size: 1}, Body: []byte("x")}
			}
			// The cut Apply: a delivery, after 20 accepts when it must be
			// an explicit transaction (a COPY).
			cut := func(prefix, deliver, batch string) []store.Mutation {
				var muts []store.Mutation
				if tc.bulk {
					for i := range 20 {
						muts = append(muts, accept(fmt.Sprintf("%s%02d", prefix, i)))
					}
				}
				return append(muts, store.DeliverMessages{Queue: q, Batch: batch, IDs: []string{deliver}})
			}
			if err := apply(accept("warm"), accept("m")); err != nil {
				t.Fatal(err)
			}
			// The same statements once before, so that the cut Apply is
			// made of cached statements.
			if err := apply(cut("warm-", "warm", "b0")...); err != nil {
				t.Fatal(err)
			}
			p.mode.Store(tc.mode)
			if err := apply(cut("new-", "m", "b1")...); err != nil {
				t.Fatalf("Apply across a cut commit: %v", err)
			}
			if p.cuts.Load() != 1 {
				t.Fatalf("the proxy cut %d connections, want 1 (the test did not exercise a lost commit)", p.cuts.Load())
			}
			m, err := s.Message(ctx, q, "m")
			if err != nil {
				t.Fatal(err)
			}
			if m.Attempts != 1 || m.Lease != "b1" {
				t.Fatalf("after an in-doubt commit: attempts %d lease %q, want exactly one delivery (1, b1)", m.Attempts, m.Lease)
			}
			want := 2
			if tc.bulk {
				want += 40
			}
			if n, _ := s.MessageCount(ctx, q); n != want {
				t.Fatalf("queue holds %d messages, want %d", n, want)
			}
		})
	}
}
