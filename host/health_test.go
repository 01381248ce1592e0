package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// GET /healthz and /readyz answer without a token once the host has
// started, and /readyz turns 503 (naming why) as soon as Shutdown begins
// while /healthz stays 200.
func TestHealthAndReadiness(t *testing.T) {
	h := startHost(t, t.TempDir())
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(h.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d, want 200", path, resp.StatusCode)
		}
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "shutting down") || !strings.Contains(rec.Body.String(), "backend_unavailable") {
		t.Fatalf("readyz after Shutdown: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ok"`) {
		t.Fatalf("healthz after Shutdown: %d %s", rec.Code, rec.Body)
	}
}
