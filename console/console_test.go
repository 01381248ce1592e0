package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerServesBuiltFilesOnly(t *testing.T) {
	h := Handler()
	get := func(method, path string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := get("GET", "/console/app.js")
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/javascript; charset=utf-8" || w.Header().Get("Content-Security-Policy") == "" {
		t.Fatalf("app.js: %d %v", w.Code, w.Header())
	}
	etag := w.Header().Get("ETag")
	if w := get("GET", "/console/app.js", "If-None-Match", etag); w.Code != 304 || w.Body.Len() != 0 {
		t.Fatalf("revalidation: %d", w.Code)
	}
	if w := get("HEAD", "/console/"); w.Code != 200 || w.Body.Len() != 0 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("HEAD: %d %d", w.Code, w.Body.Len())
	}
	for _, p := range []string{"/console/../console.go", "/console/web/src/main.ts", "/console/dist/app.js", "/other"} {
		if w := get("GET", p); w.Code != 404 {
			t.Fatalf("%s: %d", p, w.Code)
		}
	}
	if w := get("DELETE", "/console/app.js"); w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", w.Code)
	}
}

// No inline script or style in the page: the CSP allows neither.
func TestIndexHasNoInlineCode(t *testing.T) {
	b, err := dist.ReadFile("dist/index.html")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "<script>") || strings.Contains(s, "style=") || strings.Contains(s, "<style") || strings.Contains(s, "onclick") {
		t.Fatalf("inline code in index.html: %s", s)
	}
}
