package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestPostgresStore runs the real binary with -store on a fresh PostgreSQL
// database: resources, sends, retries and acknowledgements go through the
// database (the data directory holds no journal), and after a SIGKILL the
// host comes back from the database with its resources and an unsettled
// message, which it delivers again with its attempts counted.
func TestPostgresStore(t *testing.T) {
	db := pgtest.Database(t)
	// A short lease: the restart after the SIGKILL below waits for the
	// dead process's lease to expire.
	e := startEnv(t, hostOpts{args: []string{"-store", db, "-cluster-ttl", "2s"}})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 5})

	var bodies []string
	for i := range 10 {
		bodies = append(bodies, body(fmt.Sprintf("ack%d", i), "ack"))
	}
	bodies = append(bodies, body("retried", []string{"retry", "ack"}))
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		for i := range 10 {
			if k := fmt.Sprintf("ack%d", i); len(e.rec.Deliveries(k)) == 0 {
				return fmt.Errorf("%s not delivered", k)
			}
		}
		if n := len(e.rec.Deliveries("retried")); n < 2 {
			return fmt.Errorf("retried delivered %d times, want 2", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ds := e.rec.Deliveries("retried"); ds[1].Msg.Attempts != 2 {
		t.Errorf("the retried message's second delivery has attempts %d, want 2", ds[1].Msg.Attempts)
	}

	// The records are rows of the database, and the data directory holds
	// no journal.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var resources int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM store_resources WHERE space = $1", topo.Space).Scan(&resources); err != nil || resources < 5 {
		t.Fatalf("store_resources holds %d rows of the topology's space (%v), want at least 5", resources, err)
	}
	entries, err := os.ReadDir(e.host.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		if n := de.Name(); n != "host.json" && n != "admin-token" && n != "logs" && n != "host.json.lock" {
			t.Errorf("data directory holds %q: with -store it must hold only host.json, admin-token and the worker logs (no journal)", n)
		}
	}

	// A message held by a handler that never settles it, then SIGKILL:
	// the restarted host loads it from the database and delivers it again.
	e.sendHeld(ctx, topo)
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	list, err := e.admin.List(ctx, topo.Space)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != resources {
		t.Errorf("after the restart the space lists %d resources, want the %d in the database", len(list), resources)
	}
	e.waitHeldRedelivered()
}

// TestPostgresStoreUnreachable: a host whose database cannot be reached
// refuses to start, saying so, without printing the password.
func TestPostgresStoreUnreachable(t *testing.T) {
	e := startEnv(t, hostOpts{args: []string{"-store", "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2"}, noStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.host.Start(ctx); err == nil {
		t.Fatal("the host started on an unreachable database")
	}
	// The host's own output, without the harness's line that shows the
	// command it ran.
	var out string
	for _, l := range strings.Split(e.host.Out.String(), "\n") {
		if !strings.HasPrefix(l, "=== harness") {
			out += l + "\n"
		}
	}
	if !contains(out, "unreachable") || contains(out, "hunter2") {
		t.Fatalf("host output does not say the database is unreachable, or shows the password:\n%s", harness.Tail(out, 2000))
	}
}

// TestPostgresStandbyTakesOver: a second host on the same database waits
// as a standby without serving; when the active host is SIGKILLed it takes
// over within the lease's ttl, with the resources and the unsettled
// message (delivered again, attempts counted). Then the new active host is
// frozen (SIGSTOP) past its lease, the first host, restarted as a standby,
// takes over, and the frozen one, resumed, finds itself fenced and exits 1.
func TestPostgresStandbyTakesOver(t *testing.T) {
	const ttl = 2 * time.Second
	db := pgtest.Database(t)
	e := startEnv(t, hostOpts{args: []string{"-store", db, "-cluster-ttl", ttl.String()}})
	ctx := ctxT(t, 180*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 5})
	e.sendHeld(ctx, topo)

	a := e.host
	b, err := harness.NewHost(a.Bin, a.DataDir, a.Args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Kill()
		if t.Failed() {
			t.Logf("standby host output (tail):\n%s", harness.Tail(b.Out.String(), 6000))
		}
	})
	started := make(chan error, 1)
	go func() { started <- b.Start(ctx) }()
	if err := harness.Poll(30*time.Second, func() error {
		if !strings.Contains(b.Out.String(), "standby") {
			return fmt.Errorf("the second host does not say it is a standby")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		t.Fatalf("the standby served while the active host was alive (Start: %v)", err)
	default:
	}

	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := <-started; err != nil {
		t.Fatalf("standby did not take over: %v", err)
	}
	t.Logf("failover: the standby served %s after the active host's SIGKILL (lease ttl %s)", time.Since(killed).Round(time.Millisecond), ttl)
	cb := e.admin.With(e.tok["admin"])
	cb.Base = b.Base()
	list, err := cb.List(ctx, topo.Space)
	if err != nil || len(list) < 5 {
		t.Fatalf("the new active host lists %d resources (%v), want the topology's", len(list), err)
	}
	e.waitHeldRedelivered()

	// Freeze the active host past its lease; the first host, restarted,
	// waits as a standby and takes over; the frozen one is fenced.
	restarted := make(chan error, 1)
	go func() { restarted <- a.Start(ctx) }()
	if err := harness.Poll(30*time.Second, func() error {
		if strings.Count(a.Out.String(), "standby") < 1 {
			return fmt.Errorf("the restarted host does not wait as a standby")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(b.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := <-restarted; err != nil {
		syscall.Kill(b.Pid(), syscall.SIGCONT)
		t.Fatalf("the standby did not take over from a frozen host: %v", err)
	}
	if err := syscall.Kill(b.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if b.Running() {
			return fmt.Errorf("the resumed host, whose lease moved on, is still running")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.Out.String(), "lost the active lease") || b.WaitErr() == nil {
		t.Fatalf("the fenced host exited with %v without saying it lost its lease", b.WaitErr())
	}
	ca := e.admin.With(e.tok["admin"])
	ca.Base = a.Base()
	if sr, _, err := harness.Send(ctx, ca, topo.Space, topo.Worker, "WORK", []string{body("after", "ack")}); err != nil || !sr.OK {
		t.Fatalf("send to the host that took over: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if len(e.rec.Deliveries("after")) == 0 {
			return fmt.Errorf("a message sent after the second takeover was not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// sendHeld sends the message "held", whose handler holds it unsettled for a
// minute, and waits for its first delivery.
func (e *env) sendHeld(ctx context.Context, topo *harness.Topology) {
	e.t.Helper()
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("held", []string{"sleep:60000", "ack"})}); err != nil || !sr.OK {
		e.t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if len(e.rec.Deliveries("held")) == 0 {
			return fmt.Errorf("held not delivered")
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// waitHeldRedelivered waits for "held", never settled, to be delivered again
// by the host that now serves (after a restart or a takeover), with attempts 2.
func (e *env) waitHeldRedelivered() {
	e.t.Helper()
	if err := harness.Poll(60*time.Second, func() error {
		ds := e.rec.Deliveries("held")
		if len(ds) < 2 {
			return fmt.Errorf("the unsettled message was delivered %d times, want a redelivery", len(ds))
		}
		if a := ds[len(ds)-1].Msg.Attempts; a != 2 {
			return fmt.Errorf("redelivered with attempts %d, want 2", a)
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}
