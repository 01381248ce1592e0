// Package console serves the host's web console: the static assets in
// dist/, built from web/ by `go run ./console/build` (make console) and
// committed, so that building the host never needs Node.js. The console
// is a client of the Host API on the same address; it holds no state and
// no token of its own (the token an operator enters is kept in the tab's
// sessionStorage and sent as Authorization: Bearer to /v2/...).
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// ContentSecurityPolicy is sent with every console response: scripts,
// styles and connections only from the host itself (no inline script, no
// eval, no CDN), no framing, no plugins.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed dist
var dist embed.FS

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves GET and HEAD of the built assets under Prefix: Prefix
// itself is index.html; anything else under it that is not a built file is
// 404. Paths outside Prefix are not its business (404).
func Handler() http.Handler {
	assets := map[string]asset{}
	_ = fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := dist.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		assets[strings.TrimPrefix(p, "dist/")] = asset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok {
			http.Error(w, "404 no such console file", http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "405 the console is read with GET", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", a.ctype)
		// Revalidated on every load (the file names carry no hash): a
		// new host binary serves its own console at once.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		if match := r.Header.Get("If-None-Match"); match != "" && match == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return
		}
		_, _ = w.Write(a.body)
	})
}
