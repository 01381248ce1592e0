package main

import (
	"context"
	"math/rand"
	"time"
)

// pgRestarter restarts the private server PGRestarts times during the
// load: stop (alternately -m fast and -m immediate, the latter a crash
// of the server), down for 1 to 3 s, start again. It holds hostMu while
// the server is down so that no host is started then: a host refuses to
// start against an unreachable database, by design, and the killer must
// not count that as a failed restart. The running hosts ride it out.
func (d *driver) pgRestarter(ctx context.Context, rng *rand.Rand) {
	avg := d.cfg.Duration / time.Duration(d.cfg.PGRestarts+1)
	for i := 0; i < d.cfg.PGRestarts && ctx.Err() == nil; i++ {
		sleepCtx(ctx, time.Duration(float64(avg)*(0.5+rng.Float64())))
		if ctx.Err() != nil {
			return
		}
		mode := "fast"
		if i%2 == 1 {
			mode = "immediate"
		}
		down := time.Duration(1000+rng.Intn(2000)) * time.Millisecond
		d.hostMu.Lock()
		t0 := time.Now()
		if err := d.pg.Stop(mode); err != nil {
			d.hostMu.Unlock()
			d.violate("PostgreSQL restart %d: %v", i+1, err)
			return
		}
		time.Sleep(down)
		// Start with a context of its own: the server must come back
		// even when the load is over, so that the drain can run.
		sctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := d.pg.Start(sctx)
		cancel()
		d.hostMu.Unlock()
		if err != nil {
			d.violate("PostgreSQL restart %d: %v", i+1, err)
			return
		}
		d.mu.Lock()
		d.res.PGRestarts++
		d.res.PGRestartModes[mode]++
		d.res.PGDown += time.Since(t0)
		d.mu.Unlock()
		if d.cfg.Verbose {
			d.logf("torture: PostgreSQL restarted (-m %s), down %s", mode, time.Since(t0).Round(time.Millisecond))
		}
	}
}
