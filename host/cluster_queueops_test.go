package host

import (
	"context"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/schemas"
)

// Purge and redrive in an active-active cluster (spec/cluster.md §Queue
// extensions): requested on a host that does not own the queue, recorded
// there, carried out by the owner; a redrive into a queue a third party
// owns, an owner change half way, and a cancel from a non-owner.

// clusterDB is an empty database of this file's tests, dropped at the end.
func clusterDB(t *testing.T) string {
	t.Helper()
	pgtest.Require(t)
	u, drop, err := pgtest.Create(context.Background(), pgtest.ServerURL(), "clusterops_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("dropping the test database: %v", err)
		}
	})
	return u
}

// ownedQueue creates queues on c until one is delivered by want (and not
// by the others), and returns it.
func ownedQueue(t *testing.T, c *client, name string, want *Host, others ...*Host) string {
	t.Helper()
	for i := range 40 {
		uid := c.create(name+string(rune('a'+i%26))+string(rune('a'+i/26)), schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
		deadline := time.Now().Add(10 * time.Second)
		for {
			owner := -1
			for j, h := range append([]*Host{want}, others...) {
				if h.cluster.isOwned(uid) {
					owner = j
				}
			}
			if owner == 0 {
				return uid
			}
			if owner > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no host took queue %s", uid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatal("no queue landed on the wanted host")
	return ""
}

func TestClusterPurgeAndRedriveFromANonOwner(t *testing.T) {
	db := clusterDB(t)
	dir := t.TempDir()
	faults := &Faults{} // ha's
	ha, hb := startClusterHostFaulty(t, db, dir, faults), startClusterHost(t, db, dir)
	ca, cb := newClient(t, ha.URL(), ha.AdminToken()), newClient(t, hb.URL(), hb.AdminToken())

	t.Run("purge", func(t *testing.T) {
		q := ownedQueue(t, ca, "p", ha, hb)
		sendN(t, hb, q, "m", 12)
		st, op, raw := cb.do("POST", "/v2/spaces/demo/resources/"+q+"/purge", nil)
		if st != 202 || op["kind"] != "purge" {
			t.Fatalf("purge on the non-owner: %d %s", st, raw)
		}
		done := waitOp(t, ca, op["id"].(string))
		if done["state"] != "succeeded" || progress(done, "removed") != 12 {
			t.Fatalf("purge requested on the non-owner, read on the owner: %v", done)
		}
		if n := len(bodiesOf(t, ha, q)); n != 0 {
			t.Fatalf("after the purge the queue holds %d messages", n)
		}
		// The queue still takes messages, delivered by its owner.
		sendN(t, hb, q, "after", 3)
		if n := len(bodiesOf(t, ha, q)); n != 3 {
			t.Fatalf("sent 3 after the purge, the queue holds %d", n)
		}
	})

	t.Run("redrive into a queue the other host owns", func(t *testing.T) {
		src := ownedQueue(t, ca, "s", ha, hb)
		dst := ownedQueue(t, ca, "d", hb, ha)
		sendN(t, ha, src, "m", 20)
		st, op, raw := cb.do("POST", "/v2/spaces/demo/resources/"+src+"/redrive", map[string]any{
			"targetQueue": map[string]any{"resourceUid": dst}, "maxMessagesPerSecond": 6})
		if st != 202 || op["kind"] != "redrive" || progress(op, "total") != 20 {
			t.Fatalf("redrive on the non-owner: %d %s", st, raw)
		}
		// A second one while it runs is refused on either host.
		if st, _, raw := ca.do("POST", "/v2/spaces/demo/resources/"+src+"/purge", nil); st != 409 {
			t.Fatalf("purge during the redrive: %d %s", st, raw)
		}
		done := waitOp(t, ca, op["id"].(string))
		if done["state"] != "succeeded" || progress(done, "moved") != 20 {
			t.Fatalf("redrive requested on the non-owner, read on the owner: %v", done)
		}
		checkOnce(t, bodiesOf(t, ha, src), bodiesOf(t, ha, dst), 20)
		if n := len(bodiesOf(t, hb, dst)); n != 20 {
			t.Fatalf("the target holds %d messages, want 20", n)
		}
	})

	t.Run("cancel on the non-owner", func(t *testing.T) {
		src := ownedQueue(t, ca, "c", ha, hb)
		dst := ownedQueue(t, ca, "e", hb, ha)
		sendN(t, ha, src, "m", 20)
		st, op, raw := cb.do("POST", "/v2/spaces/demo/resources/"+src+"/redrive", map[string]any{
			"targetQueue": map[string]any{"resourceUid": dst}, "maxMessagesPerSecond": 4})
		if st != 202 {
			t.Fatalf("redrive: %d %s", st, raw)
		}
		id := op["id"].(string)
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, cur, _ := cb.do("GET", "/v2/spaces/demo/operations/"+id, nil)
			if progress(cur, "moved") >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress: %v", cur)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// While the owner moves messages, the queue's delete through the
		// non-owner (which handed the redrive over) is refused.
		if st, _, raw := cb.do("DELETE", "/v2/spaces/demo/resources/"+src, nil); st != 409 {
			t.Fatalf("delete of the queue during its redrive, on the non-owner: %d %s", st, raw)
		}
		st, cancelled, raw := cb.do("POST", "/v2/spaces/demo/operations/"+id+"/cancel", nil)
		if st != 200 || cancelled["state"] != "failed" {
			t.Fatalf("cancel on the non-owner: %d %s", st, raw)
		}
		moved := progress(cancelled, "moved")
		time.Sleep(time.Second) // four more moves' time at the rate
		_, after, _ := ca.do("GET", "/v2/spaces/demo/operations/"+id, nil)
		if after["state"] != "failed" || progress(after, "moved") != moved {
			t.Fatalf("after the cancel (moved %d): %v", moved, after)
		}
		a, b := bodiesOf(t, ha, src), bodiesOf(t, ha, dst)
		checkOnce(t, a, b, 20)
		if len(b) != moved {
			t.Fatalf("the cancel says %d moved, the target holds %d", moved, len(b))
		}
	})

	t.Run("the owner stops half way", func(t *testing.T) {
		src := ownedQueue(t, ca, "h", ha, hb)
		dst := ownedQueue(t, ca, "i", hb, ha)
		sendN(t, hb, src, "m", 20)
		// The owner's fifth move (and every retry of it) is refused, so
		// that it stops with exactly four moved however slow the machine,
		// never after the redrive ended.
		refused := make(chan struct{}, 1)
		if err := faults.Add(FaultRule{Mode: FailWrites, Count: 1 << 30, Targets: []string{"sends"}, Scope: dst, Skip: 4, hit: refused}); err != nil {
			t.Fatal(err)
		}
		st, op, raw := cb.do("POST", "/v2/spaces/demo/resources/"+src+"/redrive", map[string]any{
			"targetQueue": map[string]any{"resourceUid": dst}, "maxMessagesPerSecond": 10})
		if st != 202 {
			t.Fatalf("redrive: %d %s", st, raw)
		}
		id := op["id"].(string)
		<-refused
		if _, cur, _ := cb.do("GET", "/v2/spaces/demo/operations/"+id, nil); cur["state"] != "running" || progress(cur, "moved") != 4 {
			t.Fatalf("the redrive when its owner stops: %v, want running with 4 moved", cur)
		}
		ha.Shutdown(context.Background()) // hb takes src over and goes on
		done := waitOp(t, cb, id)
		if done["state"] != "succeeded" || progress(done, "moved") != 20 {
			t.Fatalf("redrive after its owner stopped: %v", done)
		}
		a, b := bodiesOf(t, hb, src), bodiesOf(t, hb, dst)
		checkOnce(t, a, b, 20)
		if len(a) != 0 {
			t.Fatalf("%d left in the dead-letter queue", len(a))
		}
	})
}
