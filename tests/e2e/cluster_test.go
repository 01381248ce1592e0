package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestPostgresClusterActive: three hosts on one database, all active
// (-cluster-active). Sends through every host are delivered (the two that
// do not own the queue wake its owner by NOTIFY); a message dead-lettered
// reaches the dead-letter queue whichever host owns it; the owner of the
// work queue is SIGKILLed while a message is unsettled and another host
// takes the queue over within the lease and delivers it again (attempts
// counted); then the new owner is frozen past its lease, the last host
// takes over, and the frozen one, resumed, finds its late writes fenced.
func TestPostgresClusterActive(t *testing.T) {
	const ttl = 2 * time.Second
	db := pgtest.Database(t)
	args := []string{"-store", db, "-cluster-ttl", ttl.String(), "-cluster-active"}
	e := startEnv(t, hostOpts{args: args})
	ctx := ctxT(t, 240*time.Second)
	a := e.host
	hosts := []*harness.Host{a}
	for range 2 {
		h, err := harness.NewHost(a.Bin, a.DataDir, a.Args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			syscall.Kill(h.Pid(), syscall.SIGCONT)
			h.Kill()
			if t.Failed() {
				t.Logf("host %s output (tail):\n%s", h.Base(), harness.Tail(h.Out.String(), 6000))
			}
		})
		if err := h.Start(ctx); err != nil {
			t.Fatalf("a second active host did not start: %v", err)
		}
		hosts = append(hosts, h)
	}
	client := func(h *harness.Host) *harness.Client {
		c := e.admin.With(e.tok["admin"])
		c.Base = h.Base()
		return c
	}
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 5})
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// owner is the host whose process holds the queue's lease (holder IDs
	// are hostname-pid-random).
	owner := func(queue string) (*harness.Host, error) {
		var holder string
		err := conn.QueryRow(ctx, `SELECT holder FROM store_leases WHERE name = $1 AND expires > now()`, "queue/"+queue).Scan(&holder)
		if err != nil {
			return nil, fmt.Errorf("no live lease on queue %s: %v", queue, err)
		}
		for _, h := range hosts {
			if strings.Contains(holder, fmt.Sprintf("-%d-", h.Pid())) {
				return h, nil
			}
		}
		return nil, fmt.Errorf("lease holder %q is none of the hosts", holder)
	}
	var own *harness.Host
	if err := harness.Poll(30*time.Second, func() (err error) { own, err = owner(topo.Queue); return err }); err != nil {
		t.Fatal(err)
	}

	// Every host lists the same resources, and a send through each is
	// delivered.
	for i, h := range hosts {
		list, err := client(h).List(ctx, topo.Space)
		if err != nil || len(list) < 5 {
			t.Fatalf("host %d lists %d resources (%v), want the topology's", i, len(list), err)
		}
		if sr, _, err := harness.Send(ctx, client(h), topo.Space, topo.Worker, "WORK", []string{body(fmt.Sprintf("via%d", i), "ack")}); err != nil || !sr.OK {
			t.Fatalf("send through host %d: %v %+v", i, err, sr)
		}
	}
	// A message whose every delivery fails goes to the dead-letter queue,
	// whose owner may be another host.
	if sr, _, err := harness.Send(ctx, client(hosts[1]), topo.Space, topo.Worker, "WORK", []string{body("dead", "retry")}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		for i := range hosts {
			if len(e.rec.Deliveries(fmt.Sprintf("via%d", i))) == 0 {
				return fmt.Errorf("the message sent through host %d was not delivered", i)
			}
		}
		for _, d := range e.rec.Deliveries("dead") {
			if d.Queue == topo.DLQName {
				return nil
			}
		}
		return fmt.Errorf("the failed message did not reach the dead-letter queue")
	}); err != nil {
		t.Fatal(err)
	}

	// SIGKILL of the owner with a message unsettled: another host takes
	// the queue over within the lease and delivers it again.
	e.sendHeld(ctx, topo)
	if err := own.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var live []*harness.Host
	for _, h := range hosts {
		if h != own {
			live = append(live, h)
		}
	}
	hosts = live
	e.waitHeldRedelivered()
	t.Logf("failover: the unsettled message was delivered again %s after the owner's SIGKILL (lease ttl %s)", time.Since(killed).Round(time.Millisecond), ttl)
	var own2 *harness.Host
	if err := harness.Poll(30*time.Second, func() (err error) { own2, err = owner(topo.Queue); return err }); err != nil {
		t.Fatal(err)
	}
	if sr, _, err := harness.Send(ctx, client(hosts[0]), topo.Space, topo.Worker, "WORK", []string{body("after-kill", "ack")}); err != nil || !sr.OK {
		t.Fatalf("send after the kill: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if len(e.rec.Deliveries("after-kill")) == 0 {
			return fmt.Errorf("a message sent after the kill was not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Freeze the owner past its lease with a message in its handler: the
	// other host takes the queue over; the frozen one, resumed, has its
	// late settlement fenced.
	if sr, _, err := harness.Send(ctx, client(own2), topo.Space, topo.Worker, "WORK", []string{body("frozen", []string{"sleep:1500", "ack"})}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if len(e.rec.Deliveries("frozen")) == 0 {
			return fmt.Errorf("frozen not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(own2.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var other *harness.Host
	for _, h := range hosts {
		if h != own2 {
			other = h
		}
	}
	if err := harness.Poll(30*time.Second, func() error {
		h, err := owner(topo.Queue)
		if err != nil {
			return err
		}
		if h != other {
			return fmt.Errorf("the queue is still owned by the frozen host")
		}
		return nil
	}); err != nil {
		syscall.Kill(own2.Pid(), syscall.SIGCONT)
		t.Fatal(err)
	}
	if err := syscall.Kill(own2.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := harness.Poll(30*time.Second, func() error {
		out := own2.Out.String()
		if !strings.Contains(out, "fenced") && !strings.Contains(out, "lost the lease of a queue") {
			return fmt.Errorf("the resumed host does not say its writes were fenced")
		}
		if ds := e.rec.Deliveries("frozen"); len(ds) < 2 {
			return fmt.Errorf("the message whose settlement was fenced was delivered %d times, want again by the new owner", len(ds))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sr, _, err := harness.Send(ctx, client(own2), topo.Space, topo.Worker, "WORK", []string{body("after-freeze", "ack")}); err != nil || !sr.OK {
		t.Fatalf("send through the resumed host: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if len(e.rec.Deliveries("after-freeze")) == 0 {
			return fmt.Errorf("a message sent after the freeze was not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
