package server

import "testing"

func TestSmokeLifecycle(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "tasks", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	if !h.eng.has("consumer", c) || !h.eng.has("queue", q) {
		t.Fatal("engine not told")
	}
	r := h.getRes("s1", c)
	h.expect(r, 200, "")
	t.Logf("%s", r.body)
	h.mustDelete("s1", c)
	h.mustDelete("s1", q)
	h.expect(h.getRes("s1", q), 404, "not_found")
}
