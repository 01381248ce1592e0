package js

import (
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/dop251/goja"
)

// canonicalURL lets the prelude skip new URL(...) for the inbound
// Request's url: whenever it says yes, the URL class must give back the
// very same string.
func TestCanonicalURLAgreesWithURLClass(t *testing.T) {
	in, err := newBareInstance(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	href, err := in.vm.RunString(`(s) => { try { return new URL(s).href; } catch (e) { return "throws " + e.message; } }`)
	if err != nil {
		t.Fatal(err)
	}
	hrefOf, _ := goja.AssertFunction(href)
	check := func(u *url.URL) bool {
		s := u.String()
		got, err := hrefOf(goja.Undefined(), in.vm.ToValue(s))
		if err != nil {
			t.Fatal(err)
		}
		ok := canonicalURL(u)
		if ok && got.String() != s {
			t.Errorf("canonicalURL(%q) but new URL gives %q", s, got)
		}
		return ok
	}
	for _, c := range []struct {
		host, path, query string
		want              bool
	}{
		{"worker.example", "/", "", true},
		{"worker.example:8080", "/a/b", "x=1&y=2", true},
		{"localhost", "/send", "", true},
		{"10.0.0.1", "/", "", true},
		{"Worker.example", "/", "", false},
		{"worker.example:80", "/", "", false},
		{"worker.example:080", "/", "", false},
		{"xn--bcher-kva.example", "/", "", false},
		{"[::1]:8080", "/", "", false},
		{"worker.example", "/a/", "", false},
		{"worker.example", "/a//b", "", false},
		{"worker.example", "/a/../b", "", false},
		{"worker.example", "/", "a='b'", false},
		{"worker.example", "/", "a=é", false},
		{"user@worker.example", "/", "", false},
		// Odd but passed through as they are.
		{"a..b", "/", "", true},
		{".", "/", "", true},
		{"-", "/", "", true},
		{"worker.example.", "/", "", true},
		{"worker.example:65536", "/", "", true},
		{"1.2.3", "/", "", true},
	} {
		u := &url.URL{Scheme: "http", Host: c.host, Path: c.path, RawQuery: c.query}
		if got := check(u); got != c.want {
			t.Errorf("canonicalURL(%q) = %v, want %v", u, got, c.want)
		}
	}
	// Random URLs over alphabets that mix what passes with what does not.
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(alphabet string, n int) string {
		var b strings.Builder
		for range r.IntN(n + 1) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	hostChars := "abcz09.-_:xnAZ%@[]"
	pathChars := "ab/./%-_~!$&'()*+,;=:@ é?#\\\"<>`{}|^"
	queryChars := "ab=&/?%-_.~!$'()*+,;:@ \"#<>`{}|^[]\\é\x7f"
	passed := 0
	for range 20000 {
		u := &url.URL{Scheme: "http", Host: pick(hostChars, 12), Path: "/" + pick(pathChars, 10), RawQuery: pick(queryChars, 10)}
		if r.IntN(2) == 0 {
			u.Scheme = "https"
		}
		if r.IntN(3) == 0 {
			u.Host += ":" + pick("0123456789", 6)
		}
		if check(u) {
			passed++
		}
	}
	t.Logf("%d of 20000 random URLs canonical", passed)
	if passed < 500 {
		t.Fatalf("only %d random URLs were canonical: the test does not exercise the fast path", passed)
	}
}

// headerPairsFor's checked pairs must make the same Headers as append
// does with the raw values, and it must only claim checked when append
// would accept every pair.
func TestCheckedHeaderPairsAgreeWithAppend(t *testing.T) {
	in, err := newBareInstance(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	vm := in.vm
	entriesV, err := vm.RunString(`(r) => JSON.stringify(Array.from(r.headers))`)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := goja.AssertFunction(entriesV)
	build := func(pairs []any, checked bool) string {
		req, err := in.h.makeRequest(goja.Undefined(), vm.ToValue("http://w/"), vm.ToValue(true), vm.ToValue("GET"), vm.NewArray(pairs...), vm.ToValue(checked), goja.Null())
		if err != nil {
			return "throws " + err.Error()
		}
		s, err := entries(goja.Undefined(), req)
		if err != nil {
			t.Fatal(err)
		}
		return s.String()
	}
	r := rand.New(rand.NewPCG(3, 4))
	pick := func(alphabet string, n int) string {
		var b strings.Builder
		for range r.IntN(n + 1) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	checkedCount := 0
	for range 5000 {
		h := http.Header{}
		for range r.IntN(4) {
			name := pick("aZ-_!~ :é\x00", 4)
			for range 1 + r.IntN(2) {
				h[name] = append(h[name], pick("a \t\r\n\x00é,", 5))
			}
		}
		pairs, checked := headerPairsFor(h)
		raw := make([]any, 0, len(pairs))
		for k, vs := range h {
			if strings.EqualFold(k, "Authorization") {
				continue
			}
			for _, v := range vs {
				raw = append(raw, strings.ToLower(k), v)
			}
		}
		want := build(raw, false)
		if !checked {
			continue
		}
		checkedCount++
		if got := build(pairs, true); got != want {
			t.Fatalf("headers %q: checked pairs give %s, append gives %s", h, got, want)
		}
	}
	if checkedCount < 500 {
		t.Fatalf("only %d random header sets were checked", checkedCount)
	}
}
