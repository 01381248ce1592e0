package loadprobe

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryRunsUntilStopped(t *testing.T) {
	var n atomic.Int32
	stop := Every(time.Millisecond, func() { n.Add(1) })
	time.Sleep(50 * time.Millisecond)
	stop()
	got := n.Load()
	if got < 2 {
		t.Fatalf("%d probes in 50 ms", got)
	}
	time.Sleep(20 * time.Millisecond)
	if n.Load() != got {
		t.Fatal("a probe ran after stop")
	}
	stop() // a second stop is harmless
}

var keep [][]byte

func TestHeapSeesAnAllocation(t *testing.T) {
	stop := Heap(time.Millisecond)
	keep = append(keep, make([]byte, 64<<20))
	for i := range keep[0] {
		keep[0][i] = 1
	}
	time.Sleep(30 * time.Millisecond)
	base, peak := stop()
	keep = nil
	if peak < base+32<<20 {
		t.Fatalf("base %d MiB, peak %d MiB after 64 MiB", base>>20, peak>>20)
	}
}
