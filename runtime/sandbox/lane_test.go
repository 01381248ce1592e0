package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
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

// TestLaneIdle: the loop goroutine of an invocation, waiting with a
// request started (childLane.start), reads the reply itself and passes
// it on; it stops waiting when woken or when its invocation ends, without
// the reply and without losing it; and an interruption that comes while a
// frame is being read, or when nobody waits, cuts no frame in two.
func TestLaneIdle(t *testing.T) {
	l, host := lanePair(t)
	type result struct {
		r   *frame
		err error
	}
	results := make(chan result, 4)
	start := func(q string) *frame {
		l.start(&frame{Op: opSend, QueueUID: q}, func(r *frame, err error) { results <- result{r, err} })
		f, err := host.read()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	never := make(chan struct{})
	idle := func(done, wake chan struct{}) chan struct{} {
		out := make(chan struct{})
		go func() { l.idle(done, wake); close(out) }()
		return out
	}
	returns := func(what string, ch chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("idle still waits after %s", what)
		}
	}
	waitIdling := func() {
		t.Helper()
		for !l.idling.Load() {
			time.Sleep(time.Millisecond)
		}
	}

	// The reply comes: idle reads it and passes it to the request.
	req := start("a")
	ret := idle(never, never)
	_ = host.write(&frame{ID: req.ID, Reply: true, IDs: []string{"id-a"}})
	returns("the reply came", ret)
	if got := <-results; got.err != nil || len(got.r.IDs) != 1 || got.r.IDs[0] != "id-a" {
		t.Fatalf("the started request got %+v, %v", got.r, got.err)
	}

	// Woken (js.Waiter.Wake: wake receives, then wakeIdle) while no reply
	// came: idle returns, and the reply, coming later, is not lost.
	req = start("b")
	wake := make(chan struct{}, 1)
	ret = idle(never, wake)
	waitIdling()
	wake <- struct{}{}
	l.wakeIdle()
	returns("it was woken", ret)
	select {
	case got := <-results:
		t.Fatalf("a result before the reply: %+v", got)
	default:
	}
	// Its invocation ends (done closed, then wakeIdle, as the runtime's
	// AfterFunc does).
	done := make(chan struct{})
	ret = idle(done, never)
	waitIdling()
	close(done)
	l.wakeIdle()
	returns("its invocation ended", ret)

	// An interruption while a frame is half written is ignored by the
	// reader of that frame, who reads it whole.
	reply := appendFrame(nil, &frame{ID: req.ID, Reply: true, IDs: []string{"id-b"}})
	ret = idle(never, never)
	waitIdling()
	_, _ = host.c.Write(reply[:3])
	for l.idling.Load() {
		time.Sleep(time.Millisecond) // until idle has the first bytes
	}
	l.rd.interrupt()
	time.Sleep(10 * time.Millisecond)
	_, _ = host.c.Write(reply[3:])
	returns("the rest of the reply came", ret)
	if got := <-results; got.err != nil || len(got.r.IDs) != 1 || got.r.IDs[0] != "id-b" {
		t.Fatalf("the second request got %+v, %v", got.r, got.err)
	}

	// A stale interruption (nobody was reading) makes the next idle
	// return early at worst; the one after reads the reply.
	req = start("c")
	l.rd.interrupt()
	_ = host.write(&frame{ID: req.ID, Reply: true, IDs: []string{"id-c"}})
	for range 2 {
		returns("a frame or an interruption", idle(never, never))
		select {
		case got := <-results:
			if got.err != nil || got.r.IDs[0] != "id-c" {
				t.Fatalf("the third request got %+v, %v", got.r, got.err)
			}
			return
		default:
		}
	}
	t.Fatal("two idles after a stale interruption did not read the reply")
}

// TestSendsWhileTimersRun: over a lane, the invocation's goroutine starts
// its sends and reads their replies itself (childLane.idle); a timer that
// fires while a send waits for the host still runs on time, and
// concurrent sends each get their own IDs.
func TestSendsWhileTimersRun(t *testing.T) {
	src := `export default { async fetch(req, env) {
		if (new URL(req.url).pathname === "/race") {
			const t0 = Date.now();
			const timer = new Promise(r => setTimeout(() => r("timer after " + (Date.now() - t0) + " ms"), 20));
			return new Response(await Promise.race([timer, env.OUT.send("held").then(() => "send")]));
		}
		const ids = await Promise.all([env.OUT.send("a"), env.OUT.send("b"), env.OUT.sendBatch([{body: "c"}, {body: "d"}])]);
		return new Response(JSON.stringify(ids));
	} };`
	fetch := func(p *Pool, v *abi.Version, path string) (string, error) {
		resp, err := p.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w"+path, nil), path)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	snd := &heldSender{arrived: make(chan string, 1), release: make(chan struct{})}
	p := newPool(t, Options{Sender: snd, Lanes: 1})
	v := worker("race", src)
	type result struct {
		body string
		err  error
	}
	race := make(chan result, 1)
	go func() {
		body, err := fetch(p, v, "/race")
		race <- result{body, err}
	}()
	<-snd.arrived
	time.Sleep(500 * time.Millisecond) // the send is held this long
	close(snd.release)
	r := <-race
	var ms int
	if _, err := fmt.Sscanf(r.body, "timer after %d ms", &ms); err != nil || r.err != nil {
		t.Fatalf("race: %q, %v; want the timer to win", r.body, r.err)
	}
	if ms > 400 {
		t.Fatalf("the 20 ms timer fired after %d ms: it waited for the held send", ms)
	}

	q := newPool(t, Options{Sender: &recSender{}, Lanes: 1})
	got, err := fetch(q, worker("all", src), "/all")
	var a, b string
	var batch []string
	if err == nil {
		var ids []json.RawMessage
		err = json.Unmarshal([]byte(got), &ids)
		if err == nil && len(ids) == 3 {
			err = errors.Join(json.Unmarshal(ids[0], &a), json.Unmarshal(ids[1], &b), json.Unmarshal(ids[2], &batch))
		}
	}
	// The host answers in the order it sends (recSender numbers the
	// messages), which need not be the order of the calls.
	distinct := map[string]bool{a: true, b: true}
	for _, id := range batch {
		distinct[id] = true
	}
	if err != nil || len(batch) != 2 || len(distinct) != 4 || distinct[""] {
		t.Fatalf("all: %s, %v; want two IDs and a batch of two, all different", got, err)
	}
}
