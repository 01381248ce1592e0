package sandbox

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// lanePair is a childLane and the host's end of the same lane, in one
// process.
func lanePair(t *testing.T) (*childLane, *laneEnd) {
	t.Helper()
	host, child, err := hostLanes(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newPipeConn(child[0], child[1])
	if err != nil {
		t.Fatal(err)
	}
	l := newChildLane(newLaneEnd(c))
	t.Cleanup(func() { host[0].close(); l.close() })
	return l, host[0]
}

// TestLaneCallsGetTheirOwnReplies: concurrent calls of one invocation each
// get the reply to their own request, whatever order the host answers in;
// an invocation the host writes meanwhile goes to the lane's next; a reply
// to a call that gave up is dropped.
func TestLaneCallsGetTheirOwnReplies(t *testing.T) {
	l, host := lanePair(t)
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := string(rune('a' + i))
			r, err := l.call(t.Context(), &frame{Op: opSend, QueueUID: q})
			switch {
			case err != nil:
				errs <- err
			case len(r.IDs) != 1 || r.IDs[0] != "re:"+q:
				errs <- errors.New("call " + q + " got the reply " + strings.Join(r.IDs, ","))
			}
		}()
	}
	var reqs []*frame
	for range n {
		f, err := host.read()
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, f)
	}
	// A call that gives up before its reply comes.
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := l.call(ctx, &frame{Op: opSend, QueueUID: "late"})
		gaveUp <- err
	}()
	late, err := host.read()
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a call whose context ended: %v, want context.Canceled", err)
	}
	// Answer last first, the late one too, and write the next invocation
	// in between.
	_ = host.write(&frame{ID: late.ID, Reply: true, IDs: []string{"dropped"}})
	for i := len(reqs) - 1; i >= 0; i-- {
		if i == 2 {
			_ = host.write(&frame{ID: 42, Op: opFetch})
		}
		_ = host.write(&frame{ID: reqs[i].ID, Reply: true, IDs: []string{"re:" + reqs[i].QueueUID}})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if f := l.next(); f == nil || f.ID != 42 || f.Op != opFetch {
		t.Fatalf("next: %+v, want the invocation the host wrote", f)
	}
	l.replies.mu.Lock()
	left := len(l.replies.pending)
	l.replies.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d calls still pending", left)
	}
}

// TestLaneEnds: when the host's end closes, a waiting call fails with
// errLaneEnded and next returns nil.
func TestLaneEnds(t *testing.T) {
	l, host := lanePair(t)
	done := make(chan error, 1)
	go func() {
		_, err := l.call(t.Context(), &frame{Op: opSend})
		done <- err
	}()
	if _, err := host.read(); err != nil {
		t.Fatal(err)
	}
	host.close()
	select {
	case err := <-done:
		if !errors.Is(err, errLaneEnded) {
			t.Fatalf("call: %v, want errLaneEnded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call still waits after the lane ended")
	}
	if f := l.next(); f != nil {
		t.Fatalf("next after the end: %+v", f)
	}
}

// TestInvocationsUseLanes: invocations run over lanes while one is free
// and over the connection when every lane is busy, with the same results;
// with Lanes negative they all go over the connection.
func TestInvocationsUseLanes(t *testing.T) {
	snd := &heldSender{arrived: make(chan string, 4), release: make(chan struct{})}
	p := newPool(t, Options{Sender: snd, Lanes: 1})
	v := worker("lanes", `export default { async fetch(req, env) {
		await env.OUT.send(new URL(req.url).pathname);
		return new Response("sent " + new URL(req.url).pathname);
	} };`)
	results := make(chan string, 2)
	fetch := func(path string) {
		resp, err := p.Fetch(context.Background(), v, httptest.NewRequest("GET", "http://w"+path, nil), path)
		if err != nil {
			results <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		results <- string(b)
	}
	go fetch("/a")
	<-snd.arrived // /a holds the only lane
	before := p.laneTotal.Load()
	go fetch("/b")
	<-snd.arrived // /b went over the connection
	close(snd.release)
	got := []string{<-results, <-results}
	if !(got[0] == "sent /a" && got[1] == "sent /b" || got[0] == "sent /b" && got[1] == "sent /a") {
		t.Fatalf("results %q", got)
	}
	if before == 0 || p.laneTotal.Load() != before {
		t.Fatalf("invocations over lanes: %d before /b, %d after, want the same (not 0): /b found the only lane busy", before, p.laneTotal.Load())
	}
	if n := p.laneCalls.Load(); n != 0 {
		t.Fatalf("%d lane calls still counted after both ended", n)
	}

	q := newPool(t, Options{Sender: &recSender{}, Lanes: -1})
	resp, err := q.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w/c", nil), "/c")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("without lanes: %v %v", resp, err)
	}
	if n := q.laneTotal.Load(); n != 0 {
		t.Fatalf("%d invocations over lanes with Lanes -1", n)
	}
}

// TestVersionSentAgain: a sandbox that no longer holds a version the host
// believes it holds (an Evict crossed an invocation on another lane) gets
// it again with the invocation, which succeeds. Without lanes the evict
// is read before the next invocation, so the first attempt surely fails.
func TestVersionSentAgain(t *testing.T) {
	p := newPool(t, Options{Sender: &recSender{}, Lanes: -1})
	v := worker("again", `export default { async fetch() { return new Response("ok"); } };`)
	for i := range 2 {
		resp, err := p.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w/", nil), "/")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("fetch %d: %v %v", i, resp, err)
		}
		if i == 0 {
			// The sandbox forgets the version; the host still marks it
			// held.
			p.mu.Lock()
			pr := p.procs[keyWorker+v.WorkerUID]
			p.mu.Unlock()
			if err := pr.c.write(&frame{Op: opEvict, VersionUID: v.UID}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCancelBeforeStart: a caller that has given up before its invocation
// starts (the cancel, over the connection, may reach the sandbox before
// the invocation, over a lane) gets its cancellation, and the sandbox is
// not killed for running past the grace.
func TestCancelBeforeStart(t *testing.T) {
	p := newPool(t, Options{Sender: &recSender{}, KillGrace: 300 * time.Millisecond})
	v := worker("early", `export default { async fetch() {
		await new Promise(r => setTimeout(r, 2000));
		return new Response("late");
	} };`)
	if _, err := p.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w/", nil), "/"); err != nil {
		t.Fatal(err) // starts the sandbox (the 2 s wait is within its 5 s limit)
	}
	for i := range 5 {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		t0 := time.Now()
		_, err := p.Fetch(ctx, v, httptest.NewRequest("GET", "http://w/", nil), "/")
		if err == nil {
			t.Fatalf("%d: a fetch whose caller had given up succeeded", i)
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("%d: the cancelled fetch took %v (%v)", i, d, err)
		}
	}
	if n := p.Ends()[EndTime]; n != 0 {
		t.Fatalf("%d sandboxes killed for time: a cancel that came before its invocation was lost", n)
	}
}
