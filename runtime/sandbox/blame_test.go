package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

// gate is the outbound transport of TestSandboxEndChargedToItsCause: a
// request to /innocent is held until the sandbox that made it ends (its
// request is cancelled), or answered at once once one has; a request to
// /poison is answered once want innocents are held, so that they are
// running in the sandbox when the poison message exhausts its memory.
type gate struct {
	want int

	mu    sync.Mutex
	held  int
	ended chan struct{} // closed when a held request was cancelled
	once  sync.Once
	seen  map[string]int
}

func (g *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	g.seen[r.URL.Path]++
	g.mu.Unlock()
	switch r.URL.Path {
	case "/innocent":
		select {
		case <-g.ended:
			return okResponse(r), nil
		default:
		}
		g.mu.Lock()
		g.held++
		g.mu.Unlock()
		select {
		case <-r.Context().Done():
			g.once.Do(func() { close(g.ended) })
			return nil, r.Context().Err()
		case <-g.ended:
		case <-time.After(60 * time.Second):
		}
		return okResponse(r), nil
	case "/poison":
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			g.mu.Lock()
			n := g.held
			g.mu.Unlock()
			if n >= g.want {
				break
			}
			select {
			case <-g.ended:
				return okResponse(r), nil
			default:
			}
		}
		return okResponse(r), nil
	}
	return &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

func okResponse(r *http.Request) *http.Response {
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}
}

const poisonWorker = `export default { async queue(batch) {
	for (const m of batch.messages) {
		const body = new TextDecoder().decode(m.body);
		if (body === "poison") {
			await fetch("http://gate.test/poison");
			const keep = [];
			for (;;) keep.push(new Uint8Array(16 << 20));
		}
		if (body === "innocent") await fetch("http://gate.test/innocent");
		await batch.acknowledge(m.id);
	}
} };`

// One poison message whose handler exhausts its sandbox's memory, beside
// three innocent batches running in the same sandbox: the innocent batches
// complete (each acknowledged once, their handler call returns nil, so the
// engine charges them nothing beyond the delivery it already counted); the
// poison one alone fails with the memory cap and, having ended two
// sandboxes (the shared one, then the one it ran again in alone), is
// quarantined: its next delivery runs alone and fails again without ending
// the worker's sandbox, whose process is the same before and after.
func TestSandboxEndChargedToItsCause(t *testing.T) {
	g := &gate{want: 3, ended: make(chan struct{}), seen: map[string]int{}}
	p := newPool(t, Options{AllowedFetchHosts: []string{"gate.test"}, Transport: g, InvocationTimeout: 30 * time.Second})
	v := worker("poison", poisonWorker)
	h, err := p.QueueHandler(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, body string, s abi.Settler) error { return runOne(t, h, id, body, s) }
	errs, settlers := runInnocentsAndPoison(t, h)
	select {
	case <-g.ended:
	default:
		t.Fatalf("the innocent batches were not running when the sandbox ended (seen %v, errors %v)", g.seen, errs)
	}
	for _, id := range []string{"i1", "i2", "i3"} {
		if errs[id] != nil {
			t.Errorf("innocent batch %s: %v, want nil (not charged)", id, errs[id])
		}
		if got := settlers[id].got; len(got) != 1 || got[0].Kind != abi.Acknowledge || got[0].MessageID != id {
			t.Errorf("innocent batch %s settled %+v, want one acknowledgement", id, got)
		}
	}
	if err := errs["p1"]; !errors.Is(err, ErrSandboxEnded) || !strings.Contains(err.Error(), "memory cap") {
		t.Fatalf("poison batch: %v, want the sandbox ended at its memory cap", err)
	}
	if len(settlers["p1"].got) != 0 {
		t.Fatalf("poison settled %+v", settlers["p1"].got)
	}
	if !p.Quarantined(v.WorkerUID, "p1") || p.Quarantined(v.WorkerUID, "i1") {
		t.Fatalf("quarantine: p1 %v, i1 %v; want p1 only", p.Quarantined(v.WorkerUID, "p1"), p.Quarantined(v.WorkerUID, "i1"))
	}
	l := logText(p, v)
	if !strings.Contains(l, "runs again alone in a fresh sandbox, no attempt charged") || !strings.Contains(l, "message p1 has ended two sandboxes") {
		t.Fatalf("log:\n%s", l)
	}

	// The next delivery of the poison runs alone: the worker's sandbox,
	// serving an innocent batch before and after, is not touched.
	if err := run("i4", "plain", &recSettler{}); err != nil {
		t.Fatal(err)
	}
	pid := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		pr := p.procs[keyWorker+v.WorkerUID]
		if pr == nil || pr.ended() {
			return 0
		}
		return pr.cmd.Process.Pid
	}
	before := pid()
	if err := run("p1", "poison", &recSettler{}); !errors.Is(err, ErrSandboxEnded) {
		t.Fatalf("quarantined poison: %v", err)
	}
	if err := run("i5", "plain", &recSettler{}); err != nil {
		t.Fatal(err)
	}
	if after := pid(); before == 0 || after != before {
		t.Fatalf("the worker's sandbox was %d before the quarantined poison ran and %d after", before, after)
	}
	n := int64(0)
	for _, c := range p.Ends() {
		n += c
	}
	if n != 3 {
		t.Fatalf("ends %v, want 3 (shared, alone, quarantined)", p.Ends())
	}
}

// A sandbox the host kills for one invocation's time limit (a native
// spin no interrupt reaches) is charged to that invocation alone: the
// innocent batches it was running (held at the gate) run again alone and
// complete; the spinning one fails with the time limit and, having ended
// one sandbox, is not quarantined.
func TestSandboxTimeLimitChargedToItsCause(t *testing.T) {
	g := &gate{want: 2, ended: make(chan struct{}), seen: map[string]int{}}
	p := newPool(t, Options{AllowedFetchHosts: []string{"gate.test"}, Transport: g, InvocationTimeout: 30 * time.Second, KillGrace: 200 * time.Millisecond})
	v := worker("spinner", `export default { async queue(batch) {
		for (const m of batch.messages) {
			const body = new TextDecoder().decode(m.body);
			if (body === "spin") {
				await fetch("http://gate.test/poison");
				/(?=a)(a+)+$/.test("a".repeat(40) + "b");
			}
			if (body === "innocent") await fetch("http://gate.test/innocent");
			await batch.acknowledge(m.id);
		}
	} };`)
	h, err := p.QueueHandler(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	settlers := map[string]*recSettler{}
	for _, id := range []string{"i1", "i2", "s1"} {
		body, limit := "innocent", 60*time.Second
		if id == "s1" {
			// The spinner's deadline is its caller's: the host kills the
			// sandbox KillGrace after it, for it.
			body, limit = "spin", 3*time.Second
		}
		s := &recSettler{}
		settlers[id] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), limit)
			defer cancel()
			err := h.HandleBatch(ctx, abi.NewBatch("b-"+id, "jobs", []abi.Message{{ID: id, Body: []byte(body), Attempts: 1}}, s))
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	select {
	case <-g.ended:
	default:
		t.Fatalf("the innocent batches were not running when the sandbox ended (seen %v, errors %v)", g.seen, errs)
	}
	for _, id := range []string{"i1", "i2"} {
		if errs[id] != nil {
			t.Errorf("innocent batch %s: %v, want nil (not charged)", id, errs[id])
		}
		if got := settlers[id].got; len(got) != 1 || got[0].MessageID != id {
			t.Errorf("innocent batch %s settled %+v, want one acknowledgement", id, got)
		}
	}
	if err := errs["s1"]; !errors.Is(err, ErrSandboxEnded) || !strings.Contains(err.Error(), "time limit") {
		t.Fatalf("spinning batch: %v, want the sandbox ended at the time limit", err)
	}
	if p.Quarantined(v.WorkerUID, "s1") {
		t.Fatal("a message that ended one sandbox is quarantined")
	}
	if l := logText(p, v); !strings.Contains(l, "another invocation ended it") {
		t.Fatalf("log:\n%s", l)
	}
}

// slowAck is the settler of TestSettlementInFlightWhenTheSandboxEnds: the
// first acknowledgement is held until its caller left (the sandbox ended),
// as a settlement already on its way to the journal, and made then; held
// signals when it is held. A later acknowledgement of the same message
// (a re-run's) is already settled.
type slowAck struct {
	held  chan struct{}
	again chan struct{}

	mu    sync.Mutex
	calls int
	got   []abi.Settlement
}

func (s *slowAck) Settle(ctx context.Context, _ string, st abi.Settlement) error {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if n > 1 {
		close(s.again)
		return abi.ErrAlreadySettled
	}
	close(s.held)
	<-ctx.Done()
	select {
	case <-s.again:
	case <-time.After(2 * time.Second):
	}
	s.mu.Lock()
	s.got = append(s.got, st)
	s.mu.Unlock()
	return nil
}

// A batch whose acknowledgement is on its way when a neighbour ends their
// sandbox, and is then made, is not run again: its message was
// acknowledged, so the handler must not process it a second time in the
// same delivery (the re-run waits for the old invocation's settlements in
// flight, and refuses any that come later, before it picks the messages
// still unsettled).
func TestSettlementInFlightWhenTheSandboxEnds(t *testing.T) {
	s := &slowAck{held: make(chan struct{}), again: make(chan struct{})}
	send := &recSender{}
	g := &heldGate{held: s.held}
	// Over the shared connection (no lanes, as when every lane is busy),
	// the host answers the sandbox's requests on goroutines of their own.
	p := newPool(t, Options{AllowedFetchHosts: []string{"gate.test"}, Transport: g, Sender: send, InvocationTimeout: 30 * time.Second, Lanes: -1})
	v := worker("inflight", `export default { async queue(batch, env) {
		for (const m of batch.messages) {
			const body = new TextDecoder().decode(m.body);
			if (body === "poison") {
				await fetch("http://gate.test/poison");
				const keep = [];
				for (;;) keep.push(new Uint8Array(16 << 20));
			}
			await env.OUT.send("did " + m.id);
			await batch.acknowledge(m.id);
		}
	} };`)
	h, err := p.QueueHandler(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var innocent, poison error
	wg.Add(2)
	go func() {
		defer wg.Done()
		innocent = h.HandleBatch(ctx, abi.NewBatch("b-i1", "jobs", []abi.Message{{ID: "i1", Body: []byte("work"), Attempts: 1}}, s))
	}()
	go func() {
		defer wg.Done()
		poison = h.HandleBatch(ctx, abi.NewBatch("b-p1", "jobs", []abi.Message{{ID: "p1", Body: []byte("poison"), Attempts: 1}}, &recSettler{}))
	}()
	wg.Wait()
	if !errors.Is(poison, ErrSandboxEnded) {
		t.Fatalf("poison: %v, want the sandbox ended", poison)
	}
	if innocent != nil {
		t.Fatalf("innocent: %v, want nil", innocent)
	}
	send.mu.Lock()
	sent := append([]string(nil), send.sent...)
	send.mu.Unlock()
	if len(sent) != 1 {
		t.Fatalf("the acknowledged message was processed %d times (sends %q), want once", len(sent), sent)
	}
	if len(s.got) != 1 || s.got[0].MessageID != "i1" {
		t.Fatalf("settled %+v", s.got)
	}
}

// heldGate answers /poison once held is closed.
type heldGate struct{ held chan struct{} }

func (g *heldGate) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-g.held:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return okResponse(r), nil
}

// A worker whose module state grows with every batch (a cache that is
// never emptied) ends its sandbox at the memory cap with whichever batch
// happens to be running, alone: that batch did not cause the end (it
// holds no more than any other), so it is not charged. A sandbox that
// served other invocations before cannot blame an end on the only one
// running: that one runs again alone in a fresh sandbox, completes there,
// and only a batch that ends its own fresh sandbox too is charged.
func TestLeakNotChargedToTheBatchRunningAlone(t *testing.T) {
	p := newPool(t, Options{MemoryLimit: 128 << 20, noWatchdog: true, InvocationTimeout: 30 * time.Second})
	ct, _ := p.Containment()
	if ct.Cgroup == "" {
		if cgroupsExpected() {
			t.Fatalf("no cgroup, but this host can make them: %v", ct.Notes)
		}
		t.Skipf("no cgroups here (the kernel's cap kills during the allocation): %v", ct.Notes)
	}
	v := worker("leak", `const kept = [];
	export default { async queue(batch) {
		const a = new Uint8Array(16 << 20);
		a.fill(1);
		kept.push(a);
		for (const m of batch.messages) await batch.acknowledge(m.id);
	} };`)
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("m%d", i)
		s := &recSettler{}
		h, err := p.QueueHandler(t.Context(), v)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		err = h.HandleBatch(ctx, abi.NewBatch("b-"+id, "jobs", []abi.Message{{ID: id, Body: []byte("x"), Attempts: 1}}, s))
		cancel()
		if err != nil {
			t.Fatalf("batch %d: %v, want nil: the sandbox's memory was its module state's, grown by the batches before it\nlog:\n%s", i, err, logText(p, v))
		}
		if p.Quarantined(v.WorkerUID, id) {
			t.Fatalf("batch %d quarantined", i)
		}
	}
	if e := p.Ends(); e[EndMemory] == 0 {
		t.Fatalf("ends %v: the leak never reached the memory cap, the test proves nothing", e)
	}
}

// When the pool is at MaxSandboxes as the innocent batches of an ended
// sandbox start again alone, a re-run waits for a sandbox to be free
// (within what is left of its delivery's time) rather than failing: a
// failure would charge the innocent batch the attempt the re-run exists
// to spare it.
func TestReRunWaitsForASandbox(t *testing.T) {
	g := &gate{want: 3, ended: make(chan struct{}), seen: map[string]int{}}
	p := newPool(t, Options{AllowedFetchHosts: []string{"gate.test"}, Transport: g, InvocationTimeout: 30 * time.Second, MaxSandboxes: 2})
	v := worker("scarce", poisonWorker)
	h, err := p.QueueHandler(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	errs, _ := runInnocentsAndPoison(t, h)
	for _, id := range []string{"i1", "i2", "i3"} {
		if errs[id] != nil {
			t.Errorf("innocent batch %s: %v, want nil (not charged)", id, errs[id])
		}
	}
	if !errors.Is(errs["p1"], ErrSandboxEnded) {
		t.Errorf("poison: %v, want the sandbox ended", errs["p1"])
	}
}

// runInnocentsAndPoison runs, at once, three innocent batches (i1, i2, i3)
// and one poison batch (p1) of one message each through h, and returns
// each batch's error and settlements once all have returned.
func runInnocentsAndPoison(t *testing.T, h abi.Handler) (map[string]error, map[string]*recSettler) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	settlers := map[string]*recSettler{}
	for _, id := range []string{"i1", "i2", "i3", "p1"} {
		body := "innocent"
		if id[0] == 'p' {
			body = "poison"
		}
		s := &recSettler{}
		settlers[id] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runOne(t, h, id, body, s)
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs, settlers
}

// runOne runs a batch of one message, id with body, through h.
func runOne(t *testing.T, h abi.Handler, id, body string, s abi.Settler) error {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	return h.HandleBatch(ctx, abi.NewBatch("b-"+id, "jobs", []abi.Message{{ID: id, Body: []byte(body), Attempts: 1}}, s))
}
