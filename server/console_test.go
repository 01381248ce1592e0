package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/takoform/queuehost/console"
)

// The console's files are served on the Host API's address without a
// token, with the console's Content-Security-Policy; any other method is a
// 405 problem, a file that was not built a 404, /console redirects to
// /console/, and no /v2/ route changes.
func TestConsoleIsServedBesideTheAPI(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("GET", "/console/", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `<script type="module" src="app.js">`) {
		t.Fatalf("GET /console/: %d %.200s", r.status, r.body)
	}
	if got := r.header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
		t.Fatalf("CSP %q", got)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("Content-Type %q", ct)
	}
	for _, f := range []string{"app.js", "app.css"} {
		if r := h.do("GET", "/console/"+f, "", nil); r.status != 200 || len(r.body) < 1000 || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("GET /console/%s: %d, %d bytes", f, r.status, len(r.body))
		}
	}
	if r := h.do("GET", "/console/nope.js", "", nil); r.status != 404 {
		t.Fatalf("a file that was not built: %d", r.status)
	}
	r = h.do("POST", "/console/", "", map[string]any{})
	h.expect(r, 405, "method_not_allowed")
	req, _ := http.NewRequest("GET", h.base+"/console", nil)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 301 || res.Header.Get("Location") != "/console/" {
		t.Fatalf("GET /console: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	// The API keeps its guard: the console's files being public opens no
	// other route.
	h.expect(h.do("GET", res2("demo"), "", nil), 401, "unauthenticated")
}

func res2(space string) string { return "/v2/spaces/" + space + "/resources" }
