package host

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

func TestFaults(t *testing.T) {
	ctx := context.Background()
	f := &Faults{}
	st := faultyStore{Store: store.NewMemory(), f: f}
	put := func(uid, space string) error {
		return st.Apply(ctx, store.PutResource{Resource: store.Resource{UID: uid, Space: space, Name: uid}})
	}
	exists := func(uid string) bool { _, err := st.Resource(ctx, uid); return err == nil }

	if err := f.Command([]string{"fail-writes", "2", "resources", "scope=s1", "skip=1"}); err != nil {
		t.Fatal(err)
	}
	if err := put("a", "s2"); err != nil || !exists("a") { // other scope
		t.Fatalf("other scope: %v", err)
	}
	if err := put("b", "s1"); err != nil || !exists("b") { // skipped
		t.Fatalf("skip: %v", err)
	}
	for _, uid := range []string{"c", "d"} {
		if err := put(uid, "s1"); !errors.Is(err, store.ErrUnavailable) || exists(uid) {
			t.Fatalf("fail-writes %s: %v, applied %v", uid, err, exists(uid))
		}
	}
	if err := put("e", "s1"); err != nil || !exists("e") { // count used up
		t.Fatalf("after count: %v", err)
	}

	if err := f.Command([]string{"unknown-outcome", "1", "message-deletion,settlements", "scope=e"}); err != nil {
		t.Fatal(err)
	}
	if err := put("e", "s1"); err != nil { // kind does not match
		t.Fatal(err)
	}
	if err := st.Apply(ctx, store.DeleteResource{UID: "e"}, store.DropQueue{Queue: "e"}); !errors.Is(err, store.ErrUnavailable) || exists("e") {
		t.Fatalf("unknown-outcome: %v, still there %v", err, exists("e"))
	}

	if err := f.Command([]string{"fail-writes", "1000000"}); err != nil {
		t.Fatal(err)
	}
	if err := put("f", "s3"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatal(err)
	}
	if err := f.Command([]string{"clear"}); err != nil {
		t.Fatal(err)
	}
	if err := put("f", "s3"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{}, {"explode"}, {"fail-writes"}, {"fail-writes", "0"}, {"fail-writes", "1", "Nope"}, {"fail-writes", "1", "PutResource"}, {"clear", "x"}} {
		if f.Command(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The fault wrapper hides none of the store's optional reads.
func TestFaultyStorePassesOptionalReadsThrough(t *testing.T) {
	ctx := context.Background()
	st := faultyStore{Store: store.NewMemory(), f: &Faults{}}
	if err := st.Apply(ctx, store.PutResource{Resource: store.Resource{UID: "a", Space: "s", Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	var s store.Store = st
	if c, ok := s.(store.ResourceCounter); !ok {
		t.Fatal("no CountResources")
	} else if n, err := c.CountResources(ctx, "s"); err != nil || n != 1 {
		t.Fatalf("CountResources = %d, %v", n, err)
	}
	v, ok := s.(interface {
		ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error)
	})
	if !ok {
		t.Fatal("no ResourcesView")
	}
	if l, err := v.ResourcesView(ctx, "s", ""); err != nil || len(l) != 1 {
		t.Fatalf("ResourcesView = %v, %v", l, err)
	}
}

func TestCapabilities(t *testing.T) {
	caps := func(cfg Config) []string { return capabilities(cfg)["capabilities"].([]string) }
	if got := caps(Config{}); slices.Contains(got, "store-faults") || slices.Contains(got, "observation-control") || !slices.Contains(got, "restart") || !slices.Contains(got, "ext-pause") || !slices.Contains(got, "ext-inspect") || !slices.Contains(got, "ext-delete-if-idle") || !slices.Contains(got, "ext-serialized") || !slices.Contains(got, "ext-purge") || !slices.Contains(got, "ext-redrive") || !slices.Contains(got, "ext-publish") {
		t.Errorf("without the fault hook: %v", got)
	}
	if got := caps(Config{Faults: &Faults{}}); !slices.Contains(got, "store-faults") || !slices.Contains(got, "observation-control") {
		t.Errorf("with the fault hook: %v", got)
	}
}

// TestPauseObservation: pause-observation scopes a pause to a space or a
// resource (every resource without a scope) and clear of the same scope
// ends it; without the fault hook there is no pause hook at all.
func TestPauseObservation(t *testing.T) {
	if observationPaused(nil) != nil {
		t.Fatal("a pause hook without the fault hook")
	}
	f := &Faults{}
	for _, args := range [][]string{{"pause-observation", "scope=s1"}, {"pause-observation", "scope=r-9"}} {
		if err := f.Command(args); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Command([]string{"pause-observation", "5"}); err == nil {
		t.Fatal("pause-observation took a count")
	}
	paused := observationPaused(f)
	for _, c := range []struct {
		space, uid string
		want       bool
	}{{"s1", "r-1", true}, {"s2", "r-9", true}, {"s2", "r-1", false}} {
		if got := paused(c.space, c.uid); got != c.want {
			t.Errorf("paused(%s, %s) = %v, want %v", c.space, c.uid, got, c.want)
		}
	}
	if err := f.Command([]string{"clear", "scope=s1"}); err != nil {
		t.Fatal(err)
	}
	if paused("s1", "r-1") || !paused("s2", "r-9") {
		t.Fatal("clear of s1 did not end exactly its pause")
	}
	f.Command([]string{"pause-observation"})
	if !paused("any", "r-x") {
		t.Fatal("a pause without scope did not cover every resource")
	}
	f.Clear("")
	if paused("s2", "r-9") || paused("any", "r-x") {
		t.Fatal("clear without scope left a pause")
	}
}
