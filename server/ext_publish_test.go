package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// newPublishHarness is a harness whose controller has the real delivery
// engine as its Engine and its Sender, as the host wires them.
func newPublishHarness(t *testing.T, st store.Store) (*harness, *delivery.Engine) {
	t.Helper()
	if st == nil {
		st = store.NewMemory()
	}
	eng := delivery.New(st, noHandlers{}, delivery.Options{Logger: slog.New(slog.DiscardHandler)})
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		eng.Stop(ctx)
	})
	h := &harness{t: t, st: st, wk: &fakeWorkers{}, log: &bytes.Buffer{}}
	ctl, srv := startServer(t, controller.Options{Store: st, Engine: eng, Sender: eng, Workers: h.wk, Logger: slog.New(slog.DiscardHandler), ObserveInterval: time.Hour}, h.wk)
	t.Cleanup(func() { _ = ctl.Stop(context.Background()) })
	h.ctl, h.srv = ctl, srv
	h.ts = newTestServer(t, srv)
	h.base, h.client = h.ts.URL, h.ts.Client()
	return h, eng
}

func msgsPath(space, uid string) string { return res(space) + "/" + uid + "/messages" }

func pub(bodies ...string) map[string]any {
	ms := []any{}
	for _, b := range bodies {
		ms = append(ms, map[string]any{"body": b})
	}
	return map[string]any{"messages": ms}
}

func ids(r *resp) []string {
	var out []string
	l, _ := r.json["messageIds"].([]any)
	for _, v := range l {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}

// bodiesOf is what the store holds for the queue, in accept order.
func (h *harness) bodiesOf(q string) []string {
	h.t.Helper()
	ms, err := h.st.Messages(h.t.Context(), q)
	if err != nil {
		h.t.Fatal(err)
	}
	var idl []string
	for _, m := range ms {
		idl = append(idl, m.ID)
	}
	bs, err := h.st.Bodies(h.t.Context(), q, idl)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func TestPublishSendsTextAndBinaryBodies(t *testing.T) {
	h, _ := newPublishHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	bin := []byte{0, 1, 2, 0xff, 0xfe}
	r := h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": []any{
		map[string]any{"body": "héllo"},
		map[string]any{"body": base64.StdEncoding.EncodeToString(bin), "bodyEncoding": "base64"},
		map[string]any{"body": `{"a":1}`, "bodyEncoding": "text"},
	}})
	h.expect(r, 200, "")
	got := ids(r)
	if len(got) != 3 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("answer %s, headers %v", r.body, r.header)
	}
	ms, _ := h.st.Messages(t.Context(), q)
	if len(ms) != 3 {
		t.Fatalf("the store holds %d messages, want 3", len(ms))
	}
	bs, err := h.st.Bodies(t.Context(), q, got)
	if err != nil {
		t.Fatal(err)
	}
	if string(bs[0]) != "héllo" || !bytes.Equal(bs[1], bin) || string(bs[2]) != `{"a":1}` {
		t.Fatalf("bodies %q", bs)
	}
}

func TestPublishHasTheBindingsLimits(t *testing.T) {
	h, eng := newPublishHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, map[string]any{"messageRetentionSeconds": 3600, "deliveryDelaySeconds": 600})
	big := strings.Repeat("é", 63500) // 127000 UTF-8 bytes, as a Binding measures a string
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub(big)), 200, "")
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub("a", big+"x")), 400, "message_too_large")
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": []any{}}), 400, "batch_too_large")
	hundred := make([]string, 101)
	for i := range hundred {
		hundred[i] = "m"
	}
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub(hundred...)), 400, "batch_too_large")
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub("a", "")), 400, "invalid_body")
	r := h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": []any{map[string]any{"body": "a"}, map[string]any{"body": "!!", "bodyEncoding": "base64"}}})
	h.expect(r, 400, "invalid_body")
	if p := r.pointers(); len(p) != 1 || p[0] != "/messages/1/body" {
		t.Fatalf("pointers %v", p)
	}
	for _, d := range []int{-1, 43201} {
		h.expect(h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": []any{map[string]any{"body": "a", "delaySeconds": d}}}), 400, "invalid_body")
	}
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": []any{map[string]any{"body": "a", "headers": map[string]any{}}}}), 400, "invalid_request")
	// Every refusal sent nothing: only the first message is held.
	if got := h.bodiesOf(q); len(got) != 1 {
		t.Fatalf("the queue holds %d messages after refused publishes, want 1", len(got))
	}
	// 100 at once; the queue's delay when none is given, 0 and 43200 as given.
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub(hundred[:100]...)), 200, "")
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": []any{map[string]any{"body": "now", "delaySeconds": 0}, map[string]any{"body": "later", "delaySeconds": 43200}}}), 200, "")
	in, err := eng.Inspect(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	if in.Messages != 103 || in.ByState["available"] != 1 || in.ByState["delayed"] != 102 {
		t.Fatalf("inspection %+v, want 103 messages: 1 available, 102 delayed", in)
	}
}

// The largest batch the Binding takes, 100 bodies of 127000 bytes, fits
// the route's request limit in base64 (about 17 MB, past the 8 MiB of the
// other routes).
func TestPublishTakesTheLargestBatchInBase64(t *testing.T) {
	h, _ := newPublishHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, 127000))
	ms := make([]any, 100)
	for i := range ms {
		ms[i] = map[string]any{"body": body, "bodyEncoding": "base64"}
	}
	r := h.do("POST", msgsPath("s1", q), tAdmin, map[string]any{"messages": ms})
	h.expect(r, 200, "")
	if len(ids(r)) != 100 {
		t.Fatalf("answer %s", r.body[:min(len(r.body), 300)])
	}
}

func TestPublishAuthorization(t *testing.T) {
	h, _ := newPublishHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	q2 := h.mustCreate("s1", "q2", fQueue, queueSpec())
	w, _ := h.worker("s1", "w", "fetch")
	r := h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "app", "grants": []any{map[string]any{"space": "s1", "role": "publisher", "queues": []string{q}}}})
	h.expect(r, 201, "")
	tPub := r.str("token")
	if g := r.get("principal", "grants"); g == nil {
		t.Fatalf("created principal %s", r.body)
	}

	h.expect(h.do("POST", msgsPath("s1", q), tPub, pub("from the app")), 200, "")
	h.expect(h.do("POST", msgsPath("s1", q2), tPub, pub("x")), 403, "forbidden")
	h.expect(h.do("POST", msgsPath("s1", w), tPub, pub("x")), 403, "forbidden")
	h.expect(h.do("POST", msgsPath("s1", "no-such-uid"), tPub, pub("x")), 403, "forbidden")
	h.expect(h.do("POST", msgsPath("s2", q), tPub, pub("x")), 404, "not_found")
	h.expect(h.do("GET", res("s1"), tPub, nil), 403, "forbidden")
	h.expect(h.do("GET", res("s1")+"/"+q, tPub, nil), 403, "forbidden")
	h.expect(h.do("GET", msgsPath("s1", q), tPub, nil), 403, "forbidden")
	h.expect(h.do("POST", res("s1")+"/"+q+"/purge", tPub, nil), 403, "forbidden")
	h.expect(h.do("DELETE", res("s1")+"/"+q, tPub, nil), 403, "forbidden")
	h.expect(h.do("POST", res("s1"), tPub, map[string]any{"name": "mine", "formUrl": fQueue, "spec": queueSpec()}), 403, "forbidden")

	h.expect(h.do("POST", msgsPath("s1", q), tViewer, pub("x")), 403, "forbidden")
	h.expect(h.do("POST", msgsPath("s1", q), tOther, pub("x")), 404, "not_found")
	h.expect(h.do("POST", msgsPath("s1", q), "", pub("x")), 401, "unauthenticated")
	// An editor narrowed to other Forms may not; one of queues may.
	h.expect(h.do("POST", msgsPath("s1", q), tQueueEd, pub("by a queue editor")), 200, "")
	if got := h.bodiesOf(q); len(got) != 2 || got[0] != "from the app" || got[1] != "by a queue editor" {
		t.Fatalf("queue holds %q", got)
	}
	if got := h.bodiesOf(q2); len(got) != 0 {
		t.Fatalf("q2 holds %q", got)
	}
	// Only a queue takes messages; an unknown UID is not found.
	h.expect(h.do("POST", msgsPath("s1", w), tAdmin, pub("x")), 404, "not_a_queue")
	h.expect(h.do("POST", msgsPath("s1", "no-such-uid"), tAdmin, pub("x")), 404, "not_found")

	// A publisher grant with forms, or queues on another role, is refused.
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "bad1", "grants": []any{map[string]any{"space": "s1", "role": "publisher", "forms": []string{fQueue}}}}), 400, "invalid_request")
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "bad2", "grants": []any{map[string]any{"space": "s1", "role": "editor", "queues": []string{q}}}}), 400, "invalid_request")
}

func TestPublishIdempotencyKey(t *testing.T) {
	h, _ := newPublishHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	first := h.do("POST", msgsPath("s1", q), tAdmin, pub("a", "b"), "Idempotency-Key", "k1")
	h.expect(first, 200, "")
	again := h.do("POST", msgsPath("s1", q), tAdmin, pub("a", "b"), "Idempotency-Key", "k1")
	h.expect(again, 200, "")
	if strings.Join(ids(again), ",") != strings.Join(ids(first), ",") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay answered %s (%v), first %s", again.body, again.header, first.body)
	}
	if got := h.bodiesOf(q); len(got) != 2 {
		t.Fatalf("the queue holds %d messages after a replay, want 2", len(got))
	}
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub("a", "c"), "Idempotency-Key", "k1"), 422, "idempotency_key_reuse")
	// Another key, or the same key by another principal, is another publish.
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub("a", "b"), "Idempotency-Key", "k2"), 200, "")
	h.expect(h.do("POST", msgsPath("s1", q), tQueueEd, pub("a", "b"), "Idempotency-Key", "k1"), 200, "")
	if got := h.bodiesOf(q); len(got) != 6 {
		t.Fatalf("the queue holds %d messages, want 6", len(got))
	}
	// A refused publish records no key: the same key sends once fixed.
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub(""), "Idempotency-Key", "k3"), 400, "invalid_body")
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub("fixed"), "Idempotency-Key", "k3"), 200, "")
	// Nothing of it is an Operation.
	r := h.do("GET", "/v2/spaces/s1/operations", tAdmin, nil)
	h.expect(r, 200, "")
	if items, _ := r.json["items"].([]any); len(items) != 1 {
		t.Fatalf("operations after publishes: %s", r.body)
	}
}

// Retries racing each other with one key send once: every answer has the
// IDs of the one publish that sent.
func TestPublishIdempotencyKeyUnderConcurrentRetries(t *testing.T) {
	// Each send's write is slow, so that the retries arrive while the
	// first is being written (the window in which a check of the key
	// alone would let them all send).
	h, _ := newPublishHarness(t, slowSends{Store: store.NewMemory(), d: 200 * time.Millisecond})
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	const n = 16
	answers := make([]*resp, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = h.do("POST", msgsPath("s1", q), tAdmin, pub("once"), "Idempotency-Key", "race") })
	}
	wg.Wait()
	want := ""
	for _, r := range answers {
		if r.status != 200 || len(ids(r)) != 1 {
			t.Fatalf("answer %d %s", r.status, r.body)
		}
		if want == "" {
			want = ids(r)[0]
		}
		if ids(r)[0] != want {
			t.Fatalf("answers with different IDs: %s and %s", want, ids(r)[0])
		}
	}
	if got := h.bodiesOf(q); len(got) != 1 {
		t.Fatalf("%d concurrent retries sent %d messages, want 1", n, len(got))
	}
}

// A publish the store could not make durable recorded no key: the retry
// with the key sends, and is not answered as a replay.
func TestPublishNotDurableRecordsNoKey(t *testing.T) {
	fs := &failingStore{Store: store.NewMemory()}
	h, _ := newPublishHarness(t, fs)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	fs.fail.Store(true)
	h.expect(h.do("POST", msgsPath("s1", q), tAdmin, pub("a"), "Idempotency-Key", "k"), 503, "backend_unavailable")
	fs.fail.Store(false)
	r := h.do("POST", msgsPath("s1", q), tAdmin, pub("a"), "Idempotency-Key", "k")
	h.expect(r, 200, "")
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry of a failed publish was answered as a replay")
	}
	if got := h.bodiesOf(q); len(got) != 1 {
		t.Fatalf("the queue holds %d messages, want 1", len(got))
	}
}

// slowSends delays every store write that accepts messages by d.
type slowSends struct {
	store.Store
	d time.Duration
}

func (s slowSends) Apply(ctx context.Context, muts ...store.Mutation) error {
	for _, m := range muts {
		if _, ok := m.(store.AcceptMessage); ok {
			time.Sleep(s.d)
			break
		}
	}
	return s.Store.Apply(ctx, muts...)
}
