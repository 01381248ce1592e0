package controller

import (
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

// TestObservedSpecFollowsTheSpecBytes: the observation cache answers the
// decoded spec of the bytes it is given, never a stale one, and forgets a
// resource the observer forgot.
func TestObservedSpecFollowsTheSpecBytes(t *testing.T) {
	type spec struct{ N int }
	env := &Env{}
	r := store.Resource{UID: "u1", Spec: []byte(`{"N":1}`)}
	if v, err := observedSpec[spec](env, r); err != nil || v.N != 1 {
		t.Fatalf("first decode = %+v, %v", v, err)
	}
	r.Spec = []byte(`{"N":2}`)
	if v, err := observedSpec[spec](env, r); err != nil || v.N != 2 {
		t.Fatalf("after the spec changed = %+v, %v; want N=2", v, err)
	}
	if _, err := observedSpec[spec](env, store.Resource{UID: "u1", Spec: []byte(`{`)}); err == nil {
		t.Fatal("a malformed spec decoded from the cache")
	}
	env.forgetSpec("u1")
	if _, ok := env.specs.Load("u1"); ok {
		t.Fatal("forgetSpec kept the entry")
	}
}
