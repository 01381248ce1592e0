package pgstore

import (
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

// TestFenceOrderIsByName (issue #35, defect 3): a pipelined group commit
// share-locks its leases in name order, whatever order its Applies came
// in, as RenewAll locks them (TestRenewAllLocksInNameOrder).
func TestFenceOrderIsByName(t *testing.T) {
	b := store.Lease{Name: "queue/b", Holder: "h", Epoch: 1}
	a := store.Lease{Name: "queue/a", Holder: "h", Epoch: 3}
	group := []*applyReq{{fence: &b}, {}, {fence: &a}, {fence: &b}}
	got := fenceOrder(group)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("fenceOrder = %v, want [a b]", got)
	}
}
