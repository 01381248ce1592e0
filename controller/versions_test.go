package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// TestVersionsFollowTheStore: Selected follows the worker's selection and
// the version's record; a decoded version is reused only while the record
// keeps the ETag it was decoded from.
func TestVersionsFollowTheStore(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	put := func(r store.Resource) {
		t.Helper()
		if err := st.Apply(ctx, store.PutResource{Resource: r}); err != nil {
			t.Fatal(err)
		}
	}
	worker := func(version string) store.Resource {
		spec := `{"handlers":["fetch"]}`
		if version != "" {
			spec = `{"handlers":["fetch"],"version":{"resourceUid":"` + version + `"}}`
		}
		return store.Resource{UID: "w1", Space: "s", Name: "w", FormURL: schemas.FormModuleWorker, Spec: []byte(spec), ETag: "w-" + version}
	}
	version := func(uid, etag, content string) store.Resource {
		return store.Resource{UID: uid, Space: "s", Name: uid, FormURL: schemas.FormWorkerVersion, ETag: etag, Creator: "alice", Exports: []string{"fetch"},
			Spec: []byte(`{"worker":{"resourceUid":"w1"},"mainModule":"main.js","modules":[{"name":"main.js","content":"` + content + `"}]}`)}
	}
	vs := NewVersions(st)

	put(worker(""))
	if _, _, err := vs.Selected(ctx, "w1"); !errors.Is(err, ErrNoVersion) {
		t.Fatalf("no version selected: %v", err)
	}
	put(version("v1", "e1", "one"))
	put(version("v2", "e1", "two"))
	put(worker("v1"))
	check := func(wantUID, wantContent string) {
		t.Helper()
		v, exports, err := vs.Selected(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if v.UID != wantUID || v.Modules[0].Content != wantContent || v.Principal != "alice" || len(exports) != 1 || exports[0] != "fetch" {
			t.Fatalf("Selected = %+v %v; want %s with %q", v, exports, wantUID, wantContent)
		}
	}
	check("v1", "one")
	check("v1", "one") // from the cache
	put(worker("v2"))
	check("v2", "two")
	// The worker's decoded spec is reused only for the same bytes: a
	// changed spec is decoded again, whatever its ETag says.
	back := worker("v1")
	back.ETag = "w-v2"
	put(back)
	check("v1", "one")
	put(worker("v2"))
	check("v2", "two")
	// A record with another ETag is decoded again.
	put(version("v2", "e2", "two, rewritten"))
	check("v2", "two, rewritten")
	if err := st.Apply(ctx, store.DeleteResource{UID: "v2"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vs.Selected(ctx, "w1"); !errors.Is(err, ErrNoVersion) {
		t.Fatalf("selected version deleted: %v", err)
	}
}
