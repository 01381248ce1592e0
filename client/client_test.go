package client_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/client"
	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/runtime/sandbox"
)

// The examples and tests run against one in-process host on a memory
// store (the client imports nothing of the host; its tests do).
var (
	hostURL    string
	adminToken string
)

func TestMain(m *testing.M) {
	sandbox.Main()
	h, err := host.New(context.Background(), host.Config{DataDir: host.MemoryDataDir, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), ShutdownGrace: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := h.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostURL, adminToken = h.URL(), h.AdminToken()
	code := m.Run()
	_ = h.Shutdown(context.Background())
	os.Exit(code)
}

// Publish one message, then a batch with an idempotency key, retried.
func Example() {
	ctx := context.Background()
	c, err := client.New(hostURL, adminToken, "shop")
	if err != nil {
		panic(err)
	}
	orders, err := c.CreateQueue(ctx, "orders", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		panic(err)
	}
	id, err := c.Publish(ctx, orders, []byte(`{"order":42}`))
	if err != nil {
		panic(err)
	}
	fmt.Println("published one:", id != "")

	batch := []client.Message{client.Text("first"), client.Text("later").After(time.Minute)}
	ids, err := c.PublishBatch(ctx, orders, batch, client.WithIdempotencyKey("nightly-2026-12-05"))
	if err != nil {
		panic(err)
	}
	// The answer was lost, say: the retry answers the same IDs, sends nothing.
	again, err := c.PublishBatch(ctx, orders, batch, client.WithIdempotencyKey("nightly-2026-12-05"))
	if err != nil {
		panic(err)
	}
	fmt.Println("published", len(ids), "then the same IDs again:", slices.Equal(ids, again))

	_, err = c.Publish(ctx, orders, make([]byte, client.MaxBodyBytes+1))
	fmt.Println("too large:", client.Code(err))
	// Output:
	// published one: true
	// published 2 then the same IDs again: true
	// too large: message_too_large
}

// admin calls the Host API as the admin, for what the client does not do
// (principals, the message listing).
func admin(t *testing.T, method, path string, body any) map[string]any {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, hostURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %v", method, path, res.StatusCode, out)
	}
	return out
}

// previews are the body previews of the queue's messages, oldest first.
func previews(t *testing.T, space, uid string) [][]byte {
	t.Helper()
	l := admin(t, "GET", "/v2/spaces/"+space+"/resources/"+uid+"/messages?limit=100", nil)
	var out [][]byte
	items, _ := l["items"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		s, _ := m["bodyPreview"].(string)
		b, _ := base64.StdEncoding.DecodeString(s)
		out = append(out, b)
	}
	return out
}

func TestPublishBodiesAndDelays(t *testing.T) {
	ctx := t.Context()
	c, err := client.New(hostURL, adminToken, "bodies")
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQueue(ctx, "q", client.QueueSpec{MessageRetentionSeconds: 3600, DeliveryDelaySeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := c.QueueUID(ctx, "q"); err != nil || uid != q {
		t.Fatalf("QueueUID: %q %v, want %q", uid, err, q)
	}
	if _, err := c.QueueUID(ctx, "nope"); client.Code(err) != "not_found" {
		t.Fatalf("QueueUID of an unknown name: %v", err)
	}
	bin := []byte{0xff, 0x00, 0xfe, 'a'}
	j, err := client.JSON(map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.PublishBatch(ctx, q, []client.Message{{Body: bin}, client.Text("héllo").After(0), j}, client.WithDelay(5*time.Second))
	if err != nil || len(ids) != 3 {
		t.Fatalf("PublishBatch: %v %v", ids, err)
	}
	got := previews(t, "bodies", q)
	if len(got) != 3 || !bytes.Equal(got[0], bin) || string(got[1]) != "héllo" || string(got[2]) != `{"n":1}` {
		t.Fatalf("bodies %q", got)
	}
	l := admin(t, "GET", "/v2/spaces/bodies/resources/"+q+"/messages?limit=100", nil)
	items, _ := l["items"].([]any)
	var states []string
	for _, it := range items {
		m, _ := it.(map[string]any)
		s, _ := m["state"].(string)
		states = append(states, s)
	}
	// 5 s from WithDelay, 0 from the message's own, 5 s again.
	if strings.Join(states, ",") != "delayed,available,delayed" {
		t.Fatalf("states %v", states)
	}
	if _, err := c.PublishBatch(ctx, q, []client.Message{client.Text("x").After(1500 * time.Millisecond)}); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Fatalf("a fractional delay: %v", err)
	}
}

func TestPublishErrors(t *testing.T) {
	ctx := t.Context()
	c, _ := client.New(hostURL, adminToken, "errors")
	q, err := c.CreateQueue(ctx, "q", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]client.Message, client.MaxBatch+1)
	for i := range many {
		many[i] = client.Text("m")
	}
	for _, tc := range []struct {
		name string
		msgs []client.Message
		code string
	}{
		{"none", nil, "batch_too_large"},
		{"101", many, "batch_too_large"},
		{"empty body", []client.Message{client.Text("")}, "invalid_body"},
		{"delay too long", []client.Message{client.Text("a").After((client.MaxDelaySeconds + 1) * time.Second)}, "invalid_body"},
		{"body too large", []client.Message{client.Text("a"), {Body: make([]byte, client.MaxBodyBytes+1)}}, "message_too_large"},
	} {
		_, err := c.PublishBatch(ctx, q, tc.msgs)
		var e *client.Error
		if client.Code(err) != tc.code || !strings.Contains(err.Error(), tc.code) || !errorsAs(err, &e) || e.Status != 400 || e.RequestID == "" {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if n := len(previews(t, "errors", q)); n != 0 {
		t.Fatalf("refused publishes left %d messages", n)
	}
	if _, err := c.Publish(ctx, "no-such-queue", []byte("x")); client.Code(err) != "not_found" {
		t.Fatalf("unknown queue: %v", err)
	}
	if _, err := c.Publish(ctx, q, []byte("a"), client.WithIdempotencyKey("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, q, []byte("b"), client.WithIdempotencyKey("k")); client.Code(err) != "idempotency_key_reuse" {
		t.Fatalf("a key reused with another body: %v", err)
	}
}

// A program given only a publisher token publishes to its queue and
// nothing else.
func TestPublisherToken(t *testing.T) {
	ctx := t.Context()
	ed, _ := client.New(hostURL, adminToken, "apps")
	q, err := ed.CreateQueue(ctx, "mine", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ed.CreateQueue(ctx, "theirs", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	p := admin(t, "POST", "/v2/principals", map[string]any{"name": "client-test-app", "grants": []any{map[string]any{"space": "apps", "role": "publisher", "queues": []string{q}}}})
	tok, _ := p["token"].(string)
	app, _ := client.New(hostURL, tok, "apps")
	if _, err := app.Publish(ctx, q, []byte("from the app")); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Publish(ctx, other, []byte("x")); client.Code(err) != "forbidden" {
		t.Fatalf("publish to another queue: %v", err)
	}
	if _, err := app.QueueUID(ctx, "mine"); client.Code(err) != "forbidden" {
		t.Fatalf("a publisher listed queues: %v", err)
	}
	if _, err := app.CreateQueue(ctx, "new", client.QueueSpec{MessageRetentionSeconds: 60}); client.Code(err) != "forbidden" {
		t.Fatalf("a publisher created a queue: %v", err)
	}
	if got := previews(t, "apps", q); len(got) != 1 || string(got[0]) != "from the app" {
		t.Fatalf("queue holds %q", got)
	}
}

func errorsAs(err error, e **client.Error) bool {
	x, ok := err.(*client.Error)
	if ok {
		*e = x
	}
	return ok
}
