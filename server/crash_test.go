package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

func openJournal(t *testing.T, dir string) *store.Journaled {
	t.Helper()
	st, _, err := store.Open(context.Background(), dir, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestJournaledRestart reopens the journaled store in the same directory:
// an Operation journaled up to its intent resumes, and an idempotency key
// replays the same Operation.
func TestJournaledRestart(t *testing.T) {
	dir := t.TempDir()
	testRestart(t, func() store.Store { return openJournal(t, dir) })
}

// TestPostgresRestart is TestJournaledRestart on a PostgreSQL database: the
// second server stands for another host on the same database, which
// resumes the first one's Operation and replays its idempotency key.
func TestPostgresRestart(t *testing.T) {
	db := pgtest.Database(t)
	testRestart(t, func() store.Store {
		st, err := pgstore.Open(context.Background(), pgstore.Config{URL: db, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

func testRestart(t *testing.T, open func() store.Store) {
	st := open()
	var pause atomic.Bool
	h := newHarness(t, st, func(o *controller.Options) {
		o.SyncWait = 20 * time.Millisecond
		o.AfterIntent = func(ctx context.Context, op store.Operation) {
			if pause.Load() {
				<-ctx.Done()
			}
		}
	})
	body := map[string]any{"name": "q", "formUrl": fQueue, "spec": queueSpec()}
	first := h.do("POST", res("s1"), tAdmin, body, "Idempotency-Key", "k-restart")
	h.expect(first, 202, "")
	h.waitDone("s1", first.str("id"))
	pause.Store(true)
	mid := h.create("s1", "q2", fQueue, queueSpec())
	h.expect(mid, 202, "")
	if mid.str("state") != "running" {
		t.Fatalf("not paused: %s", mid.body)
	}
	h.ts.Close()
	h.stop()
	st.Close()

	st2 := open()
	defer st2.Close()
	h2 := newHarness(t, st2)
	if op := h2.waitDone("s1", mid.str("id")); op.str("state") != "succeeded" {
		t.Fatalf("resumed: %s", op.body)
	}
	again := h2.do("POST", res("s1"), tAdmin, body, "Idempotency-Key", "k-restart")
	h2.expect(again, 202, "")
	if again.str("id") != first.str("id") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after reopening the journal: %v %s", again.header, again.body)
	}
	body["name"] = "other"
	h2.expect(h2.do("POST", res("s1"), tAdmin, body, "Idempotency-Key", "k-restart"), 422, "idempotency_key_reuse")
	if n := len(h2.list("s1", tAdmin)); n != 2 {
		t.Fatalf("%d resources", n)
	}
}

const childEnv = "TAKOHOST_SERVER_TEST_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		runChild(dir)
		return
	}
	os.Exit(m.Run())
}

// runChild serves the Host API over the journaled store in dir, with the
// fake engine, until killed; it prints its address on stdout.
func runChild(dir string) {
	st, _, err := store.Open(context.Background(), dir, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wk := &fakeWorkers{}
	opts := controller.Options{
		Store: st, Engine: newFakeEngine(), Workers: wk,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)), ObserveInterval: time.Hour, SyncWait: 300 * time.Millisecond,
	}
	if os.Getenv("TAKOHOST_TEST_PAUSE_AFTER_INTENT") != "" {
		opts.AfterIntent = func(ctx context.Context, op store.Operation) { <-ctx.Done() }
	}
	ctl, err := controller.New(opts)
	if err == nil {
		err = ctl.Start(context.Background())
	}
	var srv *Server
	if err == nil {
		reg := auth.NewRegistry(testAuth(), "")
		srv, err = New(Options{Controller: ctl, Auth: reg, Principals: reg, Workers: wk, Logger: opts.Logger})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(1)
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	_ = http.Serve(ln, srv)
}

type child struct {
	cmd *exec.Cmd
	url string
}

func startChild(t *testing.T, dir string, pause bool) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	if pause {
		cmd.Env = append(cmd.Env, "TAKOHOST_TEST_PAUSE_AFTER_INTENT=1")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		t.Fatalf("child did not start: %q %v", line, err)
	}
	return &child{cmd: cmd, url: "http://" + strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(os.Kill); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// remote is a harness whose requests go to a child process.
func remote(t *testing.T, c *child) *harness {
	return &harness{t: t, base: c.url, client: &http.Client{Timeout: 70 * time.Second}}
}

// TestCrashAfterIntent kills the host (SIGKILL) while Operations are
// journaled up to their intent, restarts it on the same data directory and
// checks that every Operation settles and nothing was created twice.
func TestCrashAfterIntent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	c := startChild(t, dir, false)
	h := remote(t, c)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	cons := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	gone := h.mustCreate("s1", "gone", fQueue, queueSpec())
	c.kill(t)

	c = startChild(t, dir, true)
	h = remote(t, c)
	var ops []string
	create := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "q2", "formUrl": fQueue, "spec": queueSpec()}, "Idempotency-Key", "crash-1")
	h.expect(create, 202, "")
	ops = append(ops, create.str("id"))
	sp := consumerSpec(q, w)
	sp["maxRetries"] = 7
	up := h.put("s1", cons, sp)
	h.expect(up, 202, "")
	ops = append(ops, up.str("id"))
	del := h.del("s1", gone)
	h.expect(del, 202, "")
	ops = append(ops, del.str("id"))
	for i, r := range []*resp{create, up, del} {
		if r.str("state") != "running" {
			t.Fatalf("op %d not paused: %s", i, r.body)
		}
	}
	// A retry while the outcome is unknown creates nothing new.
	retry := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "q2", "formUrl": fQueue, "spec": queueSpec()}, "Idempotency-Key", "crash-1")
	if retry.str("id") != create.str("id") {
		t.Fatalf("retry during the unknown outcome: %s", retry.body)
	}
	h.expect(h.create("s1", "q2", fQueue, queueSpec()), 409, "operation_in_progress")
	c.kill(t)

	c = startChild(t, dir, false)
	h = remote(t, c)
	for _, id := range ops {
		op := h.waitDone("s1", id)
		switch op.str("state") {
		case "succeeded", "failed", "reconciling":
		default:
			t.Fatalf("op %s did not settle: %s", id, op.body)
		}
		if op.str("state") != "succeeded" {
			t.Errorf("op %s: %s (expected the host to converge)", id, op.body)
		}
	}
	names := map[string]int{}
	for _, it := range h.list("s1", tAdmin) {
		names[it["name"].(string)]++
	}
	if names["q2"] != 1 || names["gone"] != 0 || names["q"] != 1 || names["c"] != 1 {
		t.Fatalf("resources after the crash: %v", names)
	}
	if g := h.getRes("s1", cons); g.get("spec", "maxRetries") != 7.0 || g.str("state") != "active" {
		t.Fatalf("consumer after the crash: %s", g.body)
	}
	again := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "q2", "formUrl": fQueue, "spec": queueSpec()}, "Idempotency-Key", "crash-1")
	if again.str("id") != create.str("id") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after the crash: %s", again.body)
	}
}
