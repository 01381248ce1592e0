package controller

import (
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

func TestOperationStateTable(t *testing.T) {
	states := []string{store.OpPending, store.OpRunning, store.OpReconciling, store.OpSucceeded, store.OpFailed}
	effects := []string{store.EffectNone, store.EffectPartial, store.EffectUnknown, store.EffectApplied}
	allowed := map[[2]string]bool{
		{"pending", "none"}:        true,
		{"running", "none"}:        true,
		{"running", "partial"}:     true,
		{"running", "unknown"}:     true,
		{"reconciling", "unknown"}: true,
		{"succeeded", "applied"}:   true,
		{"succeeded", "none"}:      true,
		{"failed", "none"}:         true,
		{"failed", "partial"}:      true,
	}
	for _, s := range states {
		for _, e := range effects {
			err := CheckOperationState(s, e)
			if want := allowed[[2]string{s, e}]; (err == nil) != want {
				t.Errorf("CheckOperationState(%s, %s) = %v, want allowed=%v", s, e, err, want)
			}
			if _, err2 := putOp(store.Operation{State: s, Effect: e}); (err2 == nil) != (err == nil) {
				t.Errorf("putOp disagrees with CheckOperationState for %s/%s", s, e)
			}
		}
	}
	if CheckOperationState("done", "none") == nil || CheckOperationState("running", "") == nil {
		t.Error("unknown state or effect accepted")
	}
}
