package js

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
)

const benchFetchSendWorker = `export default {
  async fetch(request, env) {
    await env.OUT.send("x");
    return new Response("id");
  },
};
`

// BenchmarkFetchSend measures one fetch invocation whose handler awaits one
// producer send and returns a small Response, serially and with concurrent
// requests sharing the version's pool.
func BenchmarkFetchSend(b *testing.B) {
	newRT := func(b *testing.B) (*Runtime, *abi.Version) {
		rt := New(Options{Sender: abitest.Sender{}})
		v := &abi.Version{UID: "v-bench-fetch", Space: "space-1", WorkerUID: "w-bench-fetch", Principal: "alice", MainModule: "main.js",
			Modules: []abi.Module{{Name: "main.js", Content: benchFetchSendWorker}}, Bindings: []abi.Binding{{Name: "OUT", QueueUID: "q-1"}}}
		return rt, v
	}
	do := func(b *testing.B, rt *Runtime, v *abi.Version) {
		r := httptest.NewRequest(http.MethodPost, "http://worker.example/send", strings.NewReader("hello"))
		r.Header.Set("Content-Type", "text/plain")
		r.Header.Set("Authorization", "Bearer secret")
		resp, err := rt.Fetch(context.Background(), v, r, "send")
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("serial", func(b *testing.B) {
		rt, v := newRT(b)
		defer rt.Close()
		do(b, rt, v)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			do(b, rt, v)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		rt, v := newRT(b)
		defer rt.Close()
		do(b, rt, v)
		b.ReportAllocs()
		b.SetParallelism(32) // 64 goroutines on 2 cores
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				do(b, rt, v)
			}
		})
	})
}

const benchSendBatchWorker = `const messages = Array.from({ length: 100 }, (_, i) => ({ body: String(i).padStart(100, "x") }));
export default {
  async fetch(request, env) {
    const ids = await env.OUT.sendBatch(messages);
    return new Response(String(ids.length));
  },
};
`

// BenchmarkFetchSendBatch measures one fetch invocation whose handler sends
// 100 messages of 100 bytes with one sendBatch: mostly the conversion of the
// message objects to Go.
func BenchmarkFetchSendBatch(b *testing.B) {
	rt := New(Options{Sender: abitest.Sender{}})
	defer rt.Close()
	v := &abi.Version{UID: "v-bench-sendbatch", Space: "space-1", WorkerUID: "w-bench-sendbatch", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: benchSendBatchWorker}}, Bindings: []abi.Binding{{Name: "OUT", QueueUID: "q-1"}}}
	do := func() {
		resp, err := rt.Fetch(context.Background(), v, httptest.NewRequest(http.MethodGet, "http://worker.example/", nil), "/")
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	do()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		do()
	}
}
