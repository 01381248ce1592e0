package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/runtime/store"
)

// admissionPoint is one admission measurement.
type admissionPoint struct {
	existing, clients, spaces int
	creates                   int64
	elapsed                   time.Duration
	err                       error
}

// admissionLayer measures creates per second through the full host
// (POST /v2/spaces/{space}/resources of an AtLeastOnceQueue, answered once
// its Operation succeeded) with 1 and 8 clients, in a space that already
// holds 10 or 3000 resources, and with 8 clients in 8 spaces.
func (b *bench) admissionLayer(ctx context.Context) {
	s := b.rep.section("Admission: creates per second through the full host",
		fmt.Sprintf("host.New on a data directory whose journal already holds N AtLeastOnceQueue resources in space bench (written to the store before the host starts); "+
			"closed-loop clients over HTTP on 127.0.0.1 each create AtLeastOnceQueue resources (a POST answered 202 once the create's Operation succeeded: "+
			"admission, the Operation's first write, the engine's AddQueue and the outcome write), %s per point or %d creates, whichever ends first. "+
			"A create writes the journal twice and waits for both (group commit shares their fdatasyncs between clients). "+
			"Ratio: creates/s ÷ the raw disk's fdatasync/s.", b.pointDur, maxAdmissionCreates),
		"resources in the space", "clients", "spaces", "creates/s", "mean per create", "ratio to fdatasync/s")
	for _, pt := range []struct{ existing, clients, spaces int }{
		{10, 1, 1}, {10, 8, 1}, {3000, 1, 1}, {3000, 8, 1}, {3000, 8, 8},
	} {
		p := b.admissionPoint(ctx, pt.existing, pt.clients, pt.spaces)
		if p.err != nil {
			s.row(fmt.Sprint(pt.existing), fmt.Sprint(pt.clients), fmt.Sprint(pt.spaces), "not measured: "+p.err.Error(), "", "")
			continue
		}
		rate := float64(p.creates) / p.elapsed.Seconds()
		mean := time.Duration(0)
		if p.creates > 0 {
			mean = p.elapsed * time.Duration(pt.clients) / time.Duration(p.creates)
		}
		b.results[fmt.Sprintf("admission/%d/%d/%d", pt.existing, pt.clients, pt.spaces)] = rate
		s.row(fmt.Sprint(pt.existing), fmt.Sprint(pt.clients), fmt.Sprint(pt.spaces), num(rate), dur(mean), ratio(rate, b.rep.Limits.FsyncPerSec))
	}
	s.note("The 3000-resource rows against the 10-resource rows show whether admission's cost depends on the unrelated resources of the space; " +
		"8 clients in 8 spaces against 8 clients in one show what the per-space lock serialises.")
}

// seedQueues writes n AtLeastOnceQueue records into a new journal in dir.
func seedQueues(ctx context.Context, dir, space string, n int) error {
	st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
	if err != nil {
		return err
	}
	defer st.Close()
	spec := json.RawMessage(`{"messageRetentionSeconds":86400}`)
	t := time.Now().UTC()
	var muts []store.Mutation
	for i := range n {
		uid := fmt.Sprintf("r-seed-%06d", i)
		muts = append(muts, store.PutResource{Resource: store.Resource{
			UID: uid, Space: space, Name: fmt.Sprintf("seed-%d", i), FormURL: formQueue, Offering: "embedded",
			Spec: spec, Observed: json.RawMessage(`{}`), State: store.StateActive, Generation: 1,
			ETag: `"1-seed"`, CreateTime: t, UpdateTime: t, Creator: "admin",
		}})
		if len(muts) == 500 || i == n-1 {
			if err := st.Apply(ctx, muts...); err != nil {
				return err
			}
			muts = muts[:0]
		}
	}
	return nil
}

func (b *bench) admissionPoint(ctx context.Context, existing, clients, spaces int) admissionPoint {
	p := admissionPoint{existing: existing, clients: clients, spaces: spaces}
	dir, err := os.MkdirTemp(b.dir, "admission-")
	if err != nil {
		p.err = err
		return p
	}
	defer os.RemoveAll(dir)
	for i := range spaces {
		if p.err = seedQueues(ctx, dir, admissionSpace(i), existing); p.err != nil {
			return p
		}
	}
	h, err := host.New(ctx, host.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger, ObserveInterval: time.Hour})
	if err != nil {
		p.err = err
		return p
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = h.Shutdown(sctx)
	}()
	if p.err = h.Start(); p.err != nil {
		return p
	}
	c := newAPIClient(h.URL(), h.AdminToken(), clients)
	spec := map[string]any{"messageRetentionSeconds": 86400}
	// Warm up: one create per space.
	for i := range spaces {
		if _, p.err = c.Create(ctx, admissionSpace(i), "warm", formQueue, spec, nil); p.err != nil {
			return p
		}
	}
	counter := b.prog.phase(fmt.Sprintf("admission %d resources, %d clients, %d spaces", existing, clients, spaces), "creates")
	defer b.prog.end()
	var n atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(b.pointDur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			space := admissionSpace(w % spaces)
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil && n.Load() < maxAdmissionCreates; i++ {
				if _, err := c.Create(ctx, space, fmt.Sprintf("c%d-%d", w, i), formQueue, spec, nil); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
				counter.Add(1)
			}
		}()
	}
	wg.Wait()
	p.elapsed, p.creates = time.Since(start), n.Load()
	if err, ok := firstErr.Load().(error); ok {
		p.err = err
	}
	return p
}

// maxAdmissionCreates ends a point early, so that a space stays below the
// host's 10 000 resources with 3000 in it already.
const maxAdmissionCreates = 5000

func admissionSpace(i int) string {
	if i == 0 {
		return benchSpace
	}
	return fmt.Sprintf("%s-%d", benchSpace, i)
}
