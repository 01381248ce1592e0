package main

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// The cluster torture (Config.Cluster): several active hosts on one
// PostgreSQL database share the load, and the killer SIGKILLs one of them
// at a time, at random. The freezer stops the owner of the work queue
// with SIGSTOP for longer than its lease, so that another host takes the
// queue over, then resumes it: whatever it writes late for that queue
// must be refused by the fence (it logs so), and the final checks prove
// that nothing was lost and nothing acknowledged was delivered again.

// startCluster starts the other active hosts on the same data directory
// (host.json and the admin token) and database.
func (d *driver) startCluster(ctx context.Context, bin, dataDir string, args []string, tok string) error {
	for i := 1; i < d.cfg.Cluster; i++ {
		h, err := harness.NewHost(bin, dataDir, args...)
		if err != nil {
			return err
		}
		h.ReadyTimeout = 60 * time.Second
		if err := h.Start(ctx); err != nil {
			return fmt.Errorf("start of active host %d: %w", i+1, err)
		}
		d.hosts = append(d.hosts, h)
		d.clients = append(d.clients, &harness.Client{Base: h.Base(), Token: tok, Timeout: 20 * time.Second})
	}
	d.res.Hosts = len(d.hosts)
	d.logf("torture: %d active hosts on one database (%s)", len(d.hosts), d.hostList())
	return nil
}

func (d *driver) hostList() string {
	var out []string
	for _, h := range d.hosts {
		out = append(out, h.Addr)
	}
	return strings.Join(out, ", ")
}

// api is the client of the next request: the hosts in turn.
func (d *driver) api() *harness.Client {
	if len(d.clients) < 2 {
		return d.c
	}
	return d.clients[(d.next.Add(1)-1)%uint64(len(d.clients))]
}

// owner is the host whose process holds the lease on queue.
func (d *driver) owner(ctx context.Context, queue string) (*harness.Host, error) {
	c, err := pgx.Connect(ctx, d.db)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	var holder string
	if err := c.QueryRow(ctx, `SELECT holder FROM store_leases WHERE name = $1 AND holder <> '' AND expires > now()`, "queue/"+queue).Scan(&holder); err != nil {
		return nil, err
	}
	for _, h := range d.hosts {
		if h.Running() && strings.Contains(holder, fmt.Sprintf("-%d-", h.Pid())) {
			return h, nil
		}
	}
	return nil, fmt.Errorf("lease holder %q is none of the running hosts", holder)
}

// freezer freezes the work queue's owner Config.Freezes times, each time
// for twice the lease plus a second, at seeded moments.
func (d *driver) freezer(ctx context.Context, rng *rand.Rand) {
	avg := d.cfg.Duration / time.Duration(d.cfg.Freezes+1)
	for i := 0; i < d.cfg.Freezes && ctx.Err() == nil; i++ {
		sleepCtx(ctx, time.Duration(float64(avg)*(0.5+rng.Float64())))
		if ctx.Err() != nil {
			return
		}
		// The owner may have just been killed (its lease not yet
		// expired): wait for a live one, for a while.
		var h *harness.Host
		err := ctx.Err()
		for end := time.Now().Add(15 * time.Second); ctx.Err() == nil; sleepCtx(ctx, 500*time.Millisecond) {
			d.hostMu.Lock()
			if h, err = d.owner(ctx, d.topo.Queue); err == nil {
				break // holding hostMu
			}
			d.hostMu.Unlock()
			if time.Now().After(end) {
				break
			}
		}
		if err != nil || ctx.Err() != nil {
			if err == nil {
				d.hostMu.Unlock()
			}
			if ctx.Err() == nil {
				d.logf("torture: freeze %d: no live owner of the work queue for 15 s (%v); skipped", i+1, err)
			}
			continue
		}
		before := strings.Count(h.Out.String(), "fenced") + strings.Count(h.Out.String(), "lost the lease of a queue")
		if err := syscall.Kill(h.Pid(), syscall.SIGSTOP); err != nil {
			d.hostMu.Unlock()
			d.violate("freeze %d: %v", i+1, err)
			continue
		}
		frozen := 2*d.cfg.StoreTTL + time.Second
		time.Sleep(frozen)
		if err := syscall.Kill(h.Pid(), syscall.SIGCONT); err != nil {
			d.violate("resume after freeze %d: %v", i+1, err)
		}
		// Give the resumed host a moment to try its late writes.
		time.Sleep(2 * time.Second)
		after := strings.Count(h.Out.String(), "fenced") + strings.Count(h.Out.String(), "lost the lease of a queue")
		d.hostMu.Unlock()
		d.mu.Lock()
		d.res.Freezes++
		if after > before {
			d.res.Fenced++
		}
		d.mu.Unlock()
		if d.cfg.Verbose {
			d.logf("torture: froze the work queue's owner %s for %s; fenced on resuming: %v", h.Addr, frozen, after > before)
		}
	}
}
