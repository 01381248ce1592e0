package server

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// Lists come a page at a time, oldest first, every resource exactly once;
// a list item leaves a WorkerVersion's module content out unless
// view=full.
func TestListPages(t *testing.T) {
	h := newHarness(t, nil)
	var want []string
	for i := range 7 {
		want = append(want, h.mustCreate("s1", fmt.Sprintf("q%d", i), fQueue, queueSpec()))
	}
	w, v := h.worker("s1", "w")
	want = append(want, w, v)
	all := h.list("s1", tAdmin)
	if len(all) != len(want) {
		t.Fatalf("one default page: %d items, want %d", len(all), len(want))
	}

	var got []string
	token, pages := "", 0
	for {
		q := url.Values{"limit": {"3"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		r := h.do("GET", res("s1")+"?"+q.Encode(), tAdmin, nil)
		h.expect(r, 200, "")
		items, _ := r.json["items"].([]any)
		if len(items) > 3 {
			t.Fatalf("page of %d items with limit 3", len(items))
		}
		for _, it := range items {
			got = append(got, it.(map[string]any)["uid"].(string))
		}
		pages++
		token = r.str("nextPageToken")
		if token == "" {
			break
		}
		if pages > 10 {
			t.Fatal("pages do not end")
		}
	}
	var order []string
	for _, it := range all {
		order = append(order, it["uid"].(string))
	}
	if pages != 3 || !slices.Equal(got, order) {
		t.Fatalf("%d pages: %v, want %v in 3 pages", pages, got, order)
	}
	for _, uid := range want {
		if !slices.Contains(got, uid) {
			t.Fatalf("%s not listed", uid)
		}
	}

	// Module content: out of list items by default, in with view=full.
	content := func(view string) any {
		r := h.do("GET", res("s1")+"?formUrl="+url.QueryEscape(fVersion)+view, tAdmin, nil)
		h.expect(r, 200, "")
		items, _ := r.json["items"].([]any)
		if len(items) != 1 {
			t.Fatalf("versions: %s", r.body)
		}
		mods := items[0].(map[string]any)["spec"].(map[string]any)["modules"].([]any)
		m := mods[0].(map[string]any)
		if m["name"] == nil {
			t.Fatalf("module without its name: %v", m)
		}
		return m["content"]
	}
	if c := content(""); c != nil {
		t.Fatalf("list item holds module content %.40q", c)
	}
	if c, _ := content("&view=full").(string); !strings.Contains(c, "export default") {
		t.Fatalf("view=full: content %.40q", c)
	}
	if r := h.getRes("s1", v); r.status != 200 || !strings.Contains(string(r.body), "export default") {
		t.Fatalf("GET of the version lost its content: %s", r.body)
	}

	for _, bad := range []string{"limit=0", "limit=501", "pageToken=bogus", "pageToken=" + url.QueryEscape("cDEuMTIz"), "view=everything"} {
		h.expect(h.do("GET", res("s1")+"?"+bad, tAdmin, nil), 400, "invalid_request")
	}
}

// A page ends early once its specs pass MaxPageBytes, with a token for
// the rest: listing large versions with view=full never builds one huge
// response.
func TestListPageBytes(t *testing.T) {
	h := newHarness(t, nil)
	w := h.mustCreate("s1", "w", fWorker, map[string]any{"handlers": []string{"fetch"}})
	big := queueModule + "// " + strings.Repeat("x", 3<<20) + "\n"
	for i := range 7 {
		h.mustCreate("s1", fmt.Sprintf("w-v%d", i), fVersion, versionSpec(w, big))
	}
	var seen, pages int
	token := ""
	for {
		q := url.Values{"view": {"full"}, "formUrl": {fVersion}}
		if token != "" {
			q.Set("pageToken", token)
		}
		r := h.do("GET", res("s1")+"?"+q.Encode(), tAdmin, nil)
		h.expect(r, 200, "")
		if len(r.body) > MaxPageBytes+4<<20 {
			t.Fatalf("a page of %d bytes", len(r.body))
		}
		items, _ := r.json["items"].([]any)
		seen += len(items)
		pages++
		if token = r.str("nextPageToken"); token == "" {
			break
		}
	}
	if seen != 7 || pages < 2 {
		t.Fatalf("%d versions in %d pages", seen, pages)
	}
}
