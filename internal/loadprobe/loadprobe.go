// Package loadprobe is what the host's load tests watch while they load it:
// the Go heap's peak (is the memory bound kept?) and a probe run at an
// interval (does a bystander still get answers?). The tests of host/ and
// server/ that flood a host with large bodies or heavy reads share it.
package loadprobe

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/runtime/startstop"
)

// Heap samples the Go heap in use (runtime.MemStats.HeapInuse) every
// interval from now on, after a garbage collection; stop ends the sampling
// and returns the heap in use at the start and the highest sample.
func Heap(every time.Duration) (stop func() (base, peak uint64)) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	end := Every(every, func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if m.HeapInuse > peak.Load() {
			peak.Store(m.HeapInuse)
		}
	})
	return func() (uint64, uint64) {
		end()
		return base, peak.Load()
	}
}

// Every runs probe every interval, in a goroutine, until stop is called;
// stop returns once the probe running then has returned.
func Every(every time.Duration, probe func()) (stop func()) {
	var b startstop.Base
	b.Every(every, false, func(context.Context) { probe() })
	return func() { _ = b.Stop(context.Background()) }
}
