package sandbox

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/membudget"
)

// The host performs a sandbox's outbound fetch within the host's memory
// budget (#36): a response body the worker's share cannot take now is not
// buffered, and the worker's fetch rejects with QuotaExceededError across
// the sandbox's connection; with the share free the same fetch succeeds,
// and nothing stays reserved.
func TestOutboundFetchMemoryBudgetInSandbox(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(2<<20))
		w.Write(bytes.Repeat([]byte("b"), 2<<20))
	}))
	defer srv.Close()
	budget := membudget.New(membudget.Limits{Total: 64 << 20, PerWorker: 16 << 20})
	p := newPool(t, Options{AllowedFetchHosts: []string{srv.Listener.Addr().String()}, BodyBudget: budget})
	v := worker("budgeted", `export default { async fetch(req) {
		const u = new URL(req.url).searchParams.get("to");
		try {
			const r = await fetch(u);
			return new Response("length " + (await r.arrayBuffer()).byteLength);
		} catch (e) {
			return new Response(e.name + ": " + e.message);
		}
	} };`)
	get := func() string {
		req := httptest.NewRequest("GET", "http://worker.invalid/?to="+url.QueryEscape(srv.URL), nil)
		resp, err := p.Fetch(t.Context(), v, req, "")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	held, err := budget.Reserve(membudget.Holder{Worker: v.WorkerUID}, 15<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(); !strings.HasPrefix(got, js.FetchBudgetErrorName+": ") || !strings.Contains(got, "this worker holds 15.0 MiB") {
		t.Fatalf("over the worker's share: %s", got)
	}
	held.Release()
	if got := get(); got != "length "+strconv.Itoa(2<<20) {
		t.Fatalf("with the share free: %s", got)
	}
	if budget.Used() != 0 || budget.Peak() < 2<<20 {
		t.Fatalf("used %d, peak %d", budget.Used(), budget.Peak())
	}
}
