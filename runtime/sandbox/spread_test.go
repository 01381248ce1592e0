package sandbox

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/takoform/queuehost/abi"
)

// heldSender holds every send until release is closed, announcing each on
// arrived.
type heldSender struct {
	arrived chan string
	release chan struct{}
}

func (s *heldSender) Send(ctx context.Context, _, _, _ string, msgs []abi.OutgoingMessage) ([]string, error) {
	s.arrived <- string(msgs[0].Body)
	select {
	case <-s.release:
		return []string{"id"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestBusyWorkerSpreads: a worker whose sandboxes are each running
// SpreadAt invocations gets another, up to Instances; an invocation goes
// to the one running the fewest; a sandbox that ends fails only the
// invocations it was running (its siblings' finish); Evict reaches every
// one of them.
func TestBusyWorkerSpreads(t *testing.T) {
	snd := &heldSender{arrived: make(chan string, 8), release: make(chan struct{})}
	p := newPool(t, Options{Sender: snd, Instances: 3, SpreadAt: 1})
	v := worker("spread", `export default { async fetch(req, env) {
		await env.OUT.send(new URL(req.url).pathname);
		return new Response("sent");
	} };`)
	type result struct {
		path string
		err  error
	}
	results := make(chan result, 4)
	fetch := func(path string) {
		resp, err := p.Fetch(context.Background(), v, httptest.NewRequest("GET", "http://w"+path, nil), path)
		if err == nil && resp.StatusCode != 200 {
			err = errors.New(resp.Status)
		}
		results <- result{path, err}
	}
	// One at a time, so that each arrives while the others are held.
	for _, path := range []string{"/a", "/b", "/c"} {
		go fetch(path)
		if got := <-snd.arrived; got != path {
			t.Fatalf("send of %q, want %q", got, path)
		}
	}
	if ks := strings.Join(p.Keys(), " "); ks != "w:w-spread w:w-spread#1 w:w-spread#2" {
		t.Fatalf("three held invocations with SpreadAt 1 run in %q, want three sandboxes", ks)
	}
	// Instances reached: a fourth goes to one of the three.
	go fetch("/d")
	<-snd.arrived
	if n := len(p.Keys()); n != 3 {
		t.Fatalf("%d sandboxes after a fourth invocation, want Instances (3)", n)
	}
	// Each ran one: the fourth went to the first of the least busy, the
	// worker's first sandbox, which now runs /a and /d. Kill it.
	p.mu.Lock()
	victim := p.procs["w:w-spread"]
	victimUsers := victim.users
	p.mu.Unlock()
	if victimUsers != 2 {
		t.Fatalf("the first sandbox runs %d invocations, want 2", victimUsers)
	}
	victim.kill(EndCrash, "killed by the test")
	failed := 0
	for range victimUsers {
		r := <-results
		if !errors.Is(r.err, ErrSandboxEnded) {
			t.Fatalf("%s on the killed sandbox: %v, want ErrSandboxEnded", r.path, r.err)
		}
		failed++
	}
	close(snd.release)
	for range 4 - failed {
		if r := <-results; r.err != nil {
			t.Fatalf("%s on a sibling of the killed sandbox: %v", r.path, r.err)
		}
	}
	p.Evict(v.UID)
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pr := range p.procs {
		pr.mu.Lock()
		sent := pr.sent[v.UID]
		pr.mu.Unlock()
		if sent {
			t.Errorf("%s still has the evicted version", k)
		}
	}
}
