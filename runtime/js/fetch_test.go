package js

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func newRequest(method, target, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return httptest.NewRequest(method, "http://host.example"+target, rd)
}

func readBody(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
