package js

import (
	"context"
	"fmt"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
)

func benchBatch(n int) *abi.Batch {
	msgs := make([]abi.Message, n)
	for i := range msgs {
		msgs[i] = abi.Message{ID: fmt.Sprintf("m%d", i), TimestampMillis: 1700000000000, Body: []byte(`{"order":12345,"item":"widget"}`), Attempts: 1}
	}
	return abi.NewBatch("bench-batch", "orders", msgs, abitest.Settler{})
}

// BenchmarkQueueInvocation measures the per-batch overhead of a JavaScript
// queue handler that acknowledges the batch (one acknowledgeAll, or one
// acknowledge per message) against a Go handler doing the same.
func BenchmarkQueueInvocation(b *testing.B) {
	goAll := abi.HandlerFunc(func(ctx context.Context, b *abi.Batch) error { return b.AcknowledgeAll(ctx) })
	goEach := abi.HandlerFunc(func(ctx context.Context, b *abi.Batch) error {
		for _, m := range b.Messages {
			if err := b.Acknowledge(ctx, m.ID); err != nil {
				return err
			}
		}
		return nil
	})
	for _, n := range []int{1, 100} {
		batch := benchBatch(n)
		b.Run(fmt.Sprintf("go/ackAll/%d", n), func(b *testing.B) { runBench(b, goAll, batch) })
		b.Run(fmt.Sprintf("go/ackEach/%d", n), func(b *testing.B) { runBench(b, goEach, batch) })
		for _, mode := range []string{"ackAll", "each"} {
			b.Run(fmt.Sprintf("js/%s/%d", mode, n), func(b *testing.B) {
				rt := New(Options{})
				defer rt.Close()
				v := loadVersion(b, "bench", "v-bench-"+mode)
				v.Vars = map[string]string{"MODE": mode}
				h, err := rt.QueueHandler(v)
				if err != nil {
					b.Fatal(err)
				}
				runBench(b, h, batch)
			})
		}
	}
}

func runBench(b *testing.B, h abi.Handler, batch *abi.Batch) {
	ctx := context.Background()
	if err := h.HandleBatch(ctx, batch); err != nil { // warm: the runtime exists
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h.HandleBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRuntimeStart measures a cold runtime of a small worker (globals,
// prelude, module evaluation), the cost of growing a version's pool.
func BenchmarkRuntimeStart(b *testing.B) {
	rt := New(Options{})
	defer rt.Close()
	e, err := rt.version(loadVersion(b, "bench", "v-bench-start"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := e.newInstance(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile measures bundling and compiling the queue fixture.
func BenchmarkCompile(b *testing.B) {
	v := loadVersion(b, "queue", "v-bench-compile")
	for i := 0; i < b.N; i++ {
		if _, err := Compile(v); err != nil {
			b.Fatal(err)
		}
	}
}
