package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
)

// TestMain lets this test binary be the sandbox it starts.
func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

func worker(uid, src string) *abi.Version {
	return &abi.Version{UID: "v-" + uid, Space: "space-" + uid, WorkerUID: "w-" + uid, Principal: "alice", MainModule: "main.js",
		Modules:  []abi.Module{{Name: "main.js", Content: src}},
		Bindings: []abi.Binding{{Name: "OUT", QueueUID: "q-out"}}}
}

type recSender struct {
	mu     sync.Mutex
	sent   []string
	delays []string
}

func (s *recSender) Send(_ context.Context, principal, space, queueUID string, msgs []abi.OutgoingMessage) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, m := range msgs {
		s.sent = append(s.sent, principal+" "+space+" "+queueUID+" "+string(m.Body))
		d := "nil"
		if m.Delay != nil {
			d = fmt.Sprint(*m.Delay)
		}
		s.delays = append(s.delays, d)
		ids = append(ids, fmt.Sprintf("id-%d", len(s.sent)))
	}
	return ids, nil
}

type recSettler struct {
	mu  sync.Mutex
	got []abi.Settlement
}

func (s *recSettler) Settle(_ context.Context, _ string, st abi.Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.got {
		if g.Kind == abi.Acknowledge && st.Kind == abi.Acknowledge && g.MessageID == st.MessageID {
			return abi.ErrAlreadySettled
		}
	}
	s.got = append(s.got, st)
	return nil
}

func newPool(t *testing.T, o Options) *Pool {
	t.Helper()
	if o.InvocationTimeout == 0 {
		o.InvocationTimeout = 5 * time.Second
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = 192 << 20
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func runBatch(t *testing.T, p *Pool, v *abi.Version, s abi.Settler, bodies ...string) error {
	t.Helper()
	h, err := p.QueueHandler(t.Context(), v)
	if err != nil {
		t.Fatalf("QueueHandler: %v", err)
	}
	var msgs []abi.Message
	for i, b := range bodies {
		msgs = append(msgs, abi.Message{ID: fmt.Sprintf("m%d", i), Body: []byte(b), Attempts: 1})
	}
	return h.HandleBatch(t.Context(), abi.NewBatch("b1", "jobs", msgs, s))
}

func logText(p *Pool, v *abi.Version) string {
	var b strings.Builder
	for _, e := range p.Logs(v.WorkerUID, 0, 1000) {
		b.WriteString(e.Level + " " + e.Message + "\n")
	}
	return b.String()
}

const echoWorker = `export default {
  async queue(batch, env, ctx) {
    for (const m of batch.messages) {
      const text = new TextDecoder().decode(m.body);
      console.log("got", text);
      await env.OUT.send("re:" + text);
      await batch.acknowledge(m.id);
    }
    const e = await batch.acknowledge(batch.messages[0].id).catch(e => e.name);
    console.log("again", e);
  },
  async fetch(req, env) {
    return new Response("hello " + req.method + " " + new URL(req.url).pathname + " " + (await req.text()), {status: 201, headers: {"x-w": "1"}});
  },
};`

// The sandbox runs the handlers and asks the host for every send and
// settlement; the host sends as the version (principal, space) and keeps
// the log.
func TestQueueAndFetchRoundTrip(t *testing.T) {
	snd := &recSender{}
	p := newPool(t, Options{Sender: snd})
	v := worker("echo", echoWorker)
	st := &recSettler{}
	if err := runBatch(t, p, v, st, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(snd.sent, "|"); got != "alice space-echo q-out re:a|alice space-echo q-out re:b" {
		t.Fatalf("sent %q", got)
	}
	if len(st.got) != 2 || st.got[1].MessageID != "m1" {
		t.Fatalf("settled %+v", st.got)
	}
	if l := logText(p, v); !strings.Contains(l, "log got a\n") || !strings.Contains(l, "log again already_settled") {
		t.Fatalf("log %q", l)
	}
	req := httptest.NewRequest("POST", "http://worker.invalid/x/y", strings.NewReader("body"))
	resp, err := p.Fetch(t.Context(), v, req, "x/y")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || string(b) != "hello POST /x/y body" || resp.Header.Get("x-w") != "1" {
		t.Fatalf("%d %q %v", resp.StatusCode, b, resp.Header)
	}
	// Concurrent first invocations of a new version of the same worker:
	// the version travels with whichever frame is written first.
	v2 := worker("echo", echoWorker)
	v2.UID = "v-echo-2"
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := p.Fetch(t.Context(), v2, httptest.NewRequest("GET", "http://worker.invalid/c", nil), "c")
			if err == nil && resp.StatusCode != 201 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent first fetches: %v", err)
		}
	}
	p.Evict(v2.UID)
	if resp, err := p.Fetch(t.Context(), v2, httptest.NewRequest("GET", "http://worker.invalid/c", nil), "c"); err != nil || resp.StatusCode != 201 {
		t.Fatalf("after Evict: %v", err)
	}
	// The concurrent fetches may have spread over more of the worker's
	// sandboxes, never over anything else.
	if ks := p.Keys(); len(ks) == 0 || len(ks) > p.opts.Instances || ks[0] != "w:w-echo" || !strings.HasPrefix(ks[len(ks)-1], "w:w-echo") {
		t.Fatalf("sandboxes %v", ks)
	}
	hs, err := p.Probe(t.Context(), v)
	if err != nil || strings.Join(hs, ",") != "fetch,queue" {
		t.Fatalf("probe %v %v", hs, err)
	}
	_, err = p.Probe(t.Context(), worker("bad", "export default {"))
	var ce *abi.CompileError
	if !errors.As(err, &ce) || ce.File != "main.js" {
		t.Fatalf("probe of a syntax error: %v", err)
	}
	// A version that no longer loads (here: its top-level code throws)
	// says so in its worker's log.
	broken := worker("broken", "throw new Error('gone'); export default {};")
	if _, err := p.QueueHandler(t.Context(), broken); !errors.As(err, &ce) {
		t.Fatalf("QueueHandler of a version that does not load: %v", err)
	}
	if l := logText(p, broken); !strings.Contains(l, "the version does not load: ") || !strings.Contains(l, "gone") {
		t.Fatalf("log %q", l)
	}
	if _, err := p.QueueHandler(t.Context(), worker("f", "export default { fetch() {} };")); !errors.Is(err, js.ErrNoQueueHandler) {
		t.Fatalf("no queue handler: %v", err)
	}
	p.reapIdle(time.Now().Add(time.Hour))
	if n := p.Stats(); n != 0 {
		t.Fatalf("%d sandboxes after reaping", n)
	}
	if err := runBatch(t, p, v, &recSettler{}, "c"); err != nil {
		t.Fatalf("after reaping: %v", err)
	}
}

// Each hostile worker ends its own sandbox with a specific reason in its
// log, while another worker's invocations go on; the next invocation of
// the hostile worker gets a fresh sandbox.
func TestHostileWorkers(t *testing.T) {
	p := newPool(t, Options{InvocationTimeout: 8 * time.Second, KillGrace: 500 * time.Millisecond, Sender: &recSender{}, MemoryLimit: DefaultMemoryLimit})
	bystander := worker("bystander", echoWorker)
	var ended atomic.Int64
	for _, c := range []struct{ name, code, reason string }{
		{"flat", "let a=[];for(let i=0;i<3e5;i++)a=[a];a.flat(Infinity);", "stack overflow"},
		// The issue's own line: two million nested arrays pass the memory
		// cap before flat's recursion passes the stack limit.
		{"flat2e6", "let a=[];for(let i=0;i<2e6;i++)a=[a];a.flat(Infinity);", "memory cap"},
		{"arraybuffer", "new (Object.getPrototypeOf(ArrayBuffer))(2**40);", "memory"},
		{"doubling", "let s='x'; for(;;) s = s + s;", "memory cap"},
		{"regexp", "/(?=a)(a+)+$/.test('a'.repeat(40) + 'b');", "time limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := worker(c.name, "export default { async queue(batch) { "+c.code+" } };")
			done := make(chan error, 1)
			go func() { done <- runBatch(t, p, v, &recSettler{}, "x") }()
			for i := 0; i < 3; i++ {
				if err := runBatch(t, p, bystander, &recSettler{}, "y"); err != nil {
					t.Fatalf("bystander: %v", err)
				}
			}
			err := <-done
			if errors.Is(err, ErrSandboxEnded) {
				ended.Add(1)
			}
			if !errors.Is(err, ErrSandboxEnded) || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("err = %v, want the sandbox ended (%s)", err, c.reason)
			}
			if l := logText(p, v); !strings.Contains(l, c.reason) {
				t.Fatalf("log %q", l)
			}
			// A fresh sandbox for the next invocation.
			err = runBatch(t, p, v, &recSettler{}, "x")
			if errors.Is(err, ErrSandboxEnded) {
				ended.Add(1)
			}
			if !errors.Is(err, ErrSandboxEnded) {
				t.Fatalf("second invocation: %v", err)
			}
		})
	}
	// Each ended sandbox is counted by why (the host's
	// takohost_sandbox_kills_total): the regular expression's two for
	// time, the others for memory or as a crash (the Go runtime's own
	// stack or memory limit); the bystander's sandbox never ended.
	e := p.Ends()
	if e[EndTime] < 2 || e[EndTime]+e[EndMemory]+e[EndCrash] != ended.Load() || e[EndInit] != 0 || e[EndShutdown] != 0 {
		t.Fatalf("ends by reason: %v, sandboxes ended: %d", e, ended.Load())
	}
}

// Admission of a module of nested brackets (the bundler's parser recurses)
// or a default export whose Proxy traps spin ends the admission sandbox,
// never the host: the version is refused with a CompileError.
func TestHostileAdmission(t *testing.T) {
	p := newPool(t, Options{StartupTimeout: time.Second, KillGrace: 500 * time.Millisecond})
	for name, src := range map[string]string{
		"brackets": "export default " + strings.Repeat("[", 400000) + strings.Repeat("]", 400000) + ";",
		"proxy":    "export default new Proxy({}, { getOwnPropertyDescriptor() { for (;;) {} } });",
		"getter":   "export default new Proxy({}, { getOwnPropertyDescriptor() { return {value: /(?=a)(a+)+$/.test('a'.repeat(40) + 'b'), configurable: true}; } });",
	} {
		_, err := p.Probe(t.Context(), worker(name, src))
		var ce *abi.CompileError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v, want a CompileError", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	hs, err := p.Probe(t.Context(), worker("ok", echoWorker))
	if err != nil || len(hs) != 2 {
		t.Fatalf("probe after: %v %v", hs, err)
	}
}

// Outbound fetch: the host performs it, at most FetchPerCall at once per
// invocation, and refuses an allowed name that resolves to loopback.
func TestOutboundFetchCapsAndAddresses(t *testing.T) {
	var cur, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("leak")) }))
	defer other.Close()
	port := other.URL[strings.LastIndex(other.URL, ":")+1:]
	p := newPool(t, Options{AllowedFetchHosts: []string{srv.Listener.Addr().String(), "localhost"}})
	v := worker("fetcher", `export default { async fetch(req) {
		const u = new URL(req.url).searchParams.get("to");
		const n = Number(new URL(req.url).searchParams.get("n"));
		const rs = await Promise.allSettled(Array.from({length: n}, () => fetch(u).then(r => r.text())));
		return new Response(JSON.stringify(rs.map(r => r.status === "fulfilled" ? r.value : r.reason.message)));
	} };`)
	get := func(to string, n int) string {
		req := httptest.NewRequest("GET", "http://worker.invalid/?n="+fmt.Sprint(n)+"&to="+to, nil)
		resp, err := p.Fetch(t.Context(), v, req, "")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := get(srv.URL, 40); strings.Count(got, `"ok"`) != 40 {
		t.Fatalf("40 fetches: %s", got)
	}
	if n := peak.Load(); n > DefaultFetchPerCall {
		t.Fatalf("%d fetches at once, more than %d", n, DefaultFetchPerCall)
	}
	if got := get("http://localhost:"+port+"/", 1); !strings.Contains(got, "loopback and private addresses") {
		t.Fatalf("name to loopback: %s", got)
	}
}

// A delay of 0 crosses the socket as 0, not as "no delay" (gob drops zero
// values).
func TestZeroDelaysSurvive(t *testing.T) {
	snd := &recSender{}
	p := newPool(t, Options{Sender: snd})
	v := worker("zero", `export default { async queue(batch, env) {
		await env.OUT.sendBatch([{body: "a", delaySeconds: 0}, {body: "b"}]);
		await batch.retry(batch.messages[0].id, 0);
		await batch.retry(batch.messages[1].id);
	} };`)
	st := &recSettler{}
	if err := runBatch(t, p, v, st, "x", "y"); err != nil {
		t.Fatal(err)
	}
	if len(st.got) != 2 || st.got[0].Delay == nil || *st.got[0].Delay != 0 || st.got[1].Delay != nil {
		t.Fatalf("settled %+v", st.got)
	}
	if got := strings.Join(snd.delays, ","); got != "0,nil" {
		t.Fatalf("send delays %s", got)
	}
}

func TestLogRateLimit(t *testing.T) {
	l := newLogLimiter(10)
	now := time.Unix(0, 0)
	n := 0
	for i := 0; i < 200; i++ {
		if l.allow("w", now) {
			n++
		}
	}
	if n != 100 || l.takeDropped("w") != 100 {
		t.Fatalf("allowed %d", n)
	}
	if !l.allow("w", now.Add(time.Second)) || l.allow("other", now) != true {
		t.Fatalf("refill")
	}
}

func TestClassify(t *testing.T) {
	for stderr, want := range map[string]string{
		"runtime: goroutine stack exceeds 67108864-byte limit\nfatal error: stack overflow\n": "stack overflow",
		"fatal error: runtime: out of memory\n":                                               "memory cap",
		"runtime: out of memory: cannot allocate 1099511627776-byte block (3997696 in use)\n": "memory cap",
		"fatal error: concurrent map writes\n\ngoroutine 1":                                   "crash (fatal error: concurrent map writes)",
		"panic: boom\n": "crash (panic)",
		"":              "",
	} {
		if got := classify(stderr); got != want {
			t.Errorf("classify(%q) = %q, want %q", stderr, got, want)
		}
	}
}

// TestSandboxProcs: a sandbox runs with the processors and the GC target
// Options.Procs and GCPercent give it, whatever the host's environment
// says.
func TestSandboxProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "7")
	t.Setenv("GOGC", "50")
	for _, procs := range []int{1, 3} {
		p := newPool(t, Options{Procs: procs, GCPercent: 100 * procs})
		pr := sandboxOf(t, p, fmt.Sprint("procs", procs))
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pr.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, "GOMAXPROCS=") || strings.HasPrefix(kv, "GOGC=") {
				got = append(got, kv)
			}
		}
		if want := fmt.Sprintf("GOMAXPROCS=%d GOGC=%d", procs, 100*procs); strings.Join(got, " ") != want {
			t.Fatalf("the sandbox's environment has %v, want only %s", got, want)
		}
	}
}
