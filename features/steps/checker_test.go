package steps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestClassify feeds the recorder a hand-made history and checks each
// class of the checker: the classification must be able to fail.
func TestClassify(t *testing.T) {
	rec, err := StartRecorder("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	post := func(e map[string]any) {
		e["scope"] = "s"
		b, _ := json.Marshal(e)
		r, err := http.Post("http://"+rec.Addr()+"/event", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
	}
	msg := func(tag, id string) map[string]any { return map[string]any{"tag": tag, "id": id} }
	ack := func(id string, at float64) map[string]any {
		return map[string]any{"op": "acknowledge", "id": id, "ok": true, "at": at}
	}
	// ok: delivered, acknowledged.
	post(map[string]any{"kind": "start", "batchId": "b1", "workerMillis": 100, "messages": []any{msg("chk1-0", "i0"), msg("chk1-1", "i1")}})
	post(map[string]any{"kind": "end", "batchId": "b1", "results": []any{ack("i0", 110), ack("i1", 111)}})
	// duplicated: chk1-1 again after its acknowledgement resolved.
	post(map[string]any{"kind": "start", "batchId": "b2", "workerMillis": 200, "messages": []any{msg("chk1-1", "i1")}})
	// unexpected: never sent; and a known tag under another ID.
	post(map[string]any{"kind": "start", "batchId": "b3", "workerMillis": 210, "messages": []any{msg("zzz", "x"), msg("chk1-3", "wrong")}})
	// over-delivered: chk1-4 four times with maxRetries 1, then acknowledged.
	for i := range 4 {
		post(map[string]any{"kind": "start", "batchId": "b4", "workerMillis": 300 + i, "messages": []any{msg("chk1-4", "i4")}})
	}
	post(map[string]any{"kind": "end", "batchId": "b4", "results": []any{ack("i4", 400)}})
	// recovered: its send was rejected, delivered anyway.
	post(map[string]any{"kind": "start", "batchId": "b5", "workerMillis": 500, "messages": []any{msg("chk1-5", "i5")}})
	// chk1-6: delivered in a batch that never reported its end.
	post(map[string]any{"kind": "start", "batchId": "b6", "workerMillis": 600, "messages": []any{msg("chk1-6", "i6")}})

	k := New(Config{Recorder: rec})
	w := &world{k: k, scope: "s"}
	c := &checker{queues: []string{"chk1"}, maxRetries: 1, msgs: map[string]*checkedMsg{}, started: time.Now()}
	for i, id := range []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6"} {
		m := &checkedMsg{tag: "chk1-" + string(rune('0'+i)), queue: "chk1", id: id, send: "ok"}
		if i == 5 {
			m.id, m.send = "", "rejected"
		}
		c.add(m)
	}
	var rep CheckerReport
	if err := Poll(5*time.Second, func() error {
		if n := len(rec.Events("s")); n != 11 {
			return fmt.Errorf("%d events recorded", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, done := w.classify(c, nil)
	// lost: chk1-2 (never delivered), chk1-3 (only under a wrong ID), chk1-6 (no report, queue not drained).
	if rep.OK != 1 || rep.Duplicated != 1 || rep.Unexpected != 2 || rep.OverDelivered != 1 || rep.Recovered != 1 || rep.Lost != 3 || done {
		t.Fatalf("classified %s (done %v), examples %v", rep, done, rep.Examples)
	}
	rep, _ = w.classify(c, map[string]bool{"chk1": true})
	if rep.Lost != 2 || rep.Unreported != 1 {
		t.Fatalf("with the queue drained: %s", rep)
	}
}

// TestClassifyDuplicatedAfterResolvedAck: a history whose only fault is a
// delivery that started after an acknowledgement of the same message had
// resolved must fail the checker, whether its send resolved or its outcome
// was unknown; the same redelivery started before the acknowledgement
// resolved is the at-least-once contract and passes.
func TestClassifyDuplicatedAfterResolvedAck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		send      string
		secondAt  float64 // the second delivery's start, worker clock
		wantDup   int
		wantRedel int
	}{
		{"after the ack, send resolved", "ok", 200, 1, 0},
		{"after the ack, send unknown", "unknown", 200, 1, 0},
		{"before the ack resolved", "ok", 105, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := StartRecorder("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			post := func(e map[string]any) {
				e["scope"] = "s"
				b, _ := json.Marshal(e)
				r, err := http.Post("http://"+rec.Addr()+"/event", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				r.Body.Close()
			}
			msg := map[string]any{"tag": "chk1-0", "id": "i0"}
			ack := func(at float64) map[string]any {
				return map[string]any{"op": "acknowledge", "id": "i0", "ok": true, "at": at}
			}
			post(map[string]any{"kind": "start", "batchId": "b1", "workerMillis": 100, "messages": []any{msg}})
			post(map[string]any{"kind": "end", "batchId": "b1", "results": []any{ack(110)}})
			post(map[string]any{"kind": "start", "batchId": "b2", "workerMillis": tc.secondAt, "messages": []any{msg}})
			post(map[string]any{"kind": "end", "batchId": "b2", "results": []any{}})
			if err := Poll(5*time.Second, func() error {
				if n := len(rec.Events("s")); n != 4 {
					return fmt.Errorf("%d events recorded", n)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			c := &checker{queues: []string{"chk1"}, maxRetries: 3, msgs: map[string]*checkedMsg{}, started: time.Now()}
			m := &checkedMsg{tag: "chk1-0", queue: "chk1", send: tc.send}
			if tc.send == "ok" {
				m.id = "i0"
			}
			c.add(m)
			w := &world{k: New(Config{Recorder: rec}), scope: "s"}
			rep, _ := w.classify(c, map[string]bool{"chk1": true})
			if rep.Duplicated != tc.wantDup || rep.Redelivered != tc.wantRedel {
				t.Fatalf("classified %s, examples %v", rep, rep.Examples)
			}
			if (rep.Bad() > 0) != (tc.wantDup > 0) {
				t.Fatalf("Bad() = %d with %d duplicated: the run would not fail", rep.Bad(), rep.Duplicated)
			}
		})
	}
}
