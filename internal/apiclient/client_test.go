package apiclient_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/internal/apiclient"
)

// The client's typed calls (through the generated client) and Do reach an
// in-process host: create, read, replace, list, delete, and a problem.
func TestClientAgainstAHost(t *testing.T) {
	ctx := t.Context()
	h, err := host.New(ctx, host.Config{DataDir: host.MemoryDataDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(sctx)
	})
	ts := httptest.NewServer(h.Handler())
	t.Cleanup(ts.Close)
	c := apiclient.New(ts.URL, h.AdminToken())

	q, err := c.Create(ctx, "s", "q", apiclient.FormQueue, map[string]any{"messageRetentionSeconds": 60}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "s", q, map[string]any{"messageRetentionSeconds": 120}); err != nil {
		t.Fatal(err)
	}
	r, _, err := c.Get(ctx, "s", q)
	if err != nil || r.Generation != 2 || r.Spec["messageRetentionSeconds"] != 120.0 {
		t.Fatalf("get: %+v %v", r, err)
	}
	if n, err := c.MessageCount(ctx, "s", q); err != nil || n != 0 {
		t.Fatalf("message count %d %v", n, err)
	}
	if l, err := c.List(ctx, "s"); err != nil || len(l) != 1 {
		t.Fatalf("list %v %v", l, err)
	}
	bad, err := c.Post(ctx, "s", "q", apiclient.FormQueue, map[string]any{"messageRetentionSeconds": 60}, nil)
	if err != nil || bad.Status != 409 || bad.Code() != "name_conflict" || !bad.IsProblem() {
		t.Fatalf("second create: %v %v", bad, err)
	}
	if r, err := c.With("nope").Do(ctx, "GET", "/v2/spaces/s/resources", nil, nil); err != nil || r.Code() != "unauthenticated" {
		t.Fatalf("bad token: %v %v", r, err)
	}
	if err := c.Delete(ctx, "s", q); err != nil {
		t.Fatal(err)
	}
	if _, r, err := c.Get(ctx, "s", q); err == nil || r.Status != 404 {
		t.Fatalf("after delete: %v %v", r, err)
	}
}
