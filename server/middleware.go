package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/schemas"
)

type ctxKey struct{}

// reqInfo travels in the request context: the middleware fills it, the
// handlers and the access log read it.
type reqInfo struct {
	id        string
	route     string // the mux pattern that served it, "" when none matched
	principal *auth.Principal
	body      []byte // the validated request body (POST, PUT)
	maxBody   int64  // the route's body limit when not MaxBodyBytes (routeGuard)
}

func info(ctx context.Context) *reqInfo {
	if ri, ok := ctx.Value(ctxKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

func requestID(ctx context.Context) string { return info(ctx).id }

func principal(ctx context.Context) *auth.Principal { return info(ctx).principal }

var clientRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// requestID gives every request an ID (the client's X-Request-Id when it is
// a plain token, a fresh one otherwise) and echoes it.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !clientRequestID.MatchString(id) {
			id = newID("req-")
		}
		w.Header().Set("X-Request-Id", id)
		ri := &reqInfo{id: id}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ri)))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// accessLog writes one JSON line per request. It logs the path without the
// query and never a header value or a body, so no token or secret can
// reach the log.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		ri := info(r.Context())
		who := ""
		if ri.principal != nil {
			who = ri.principal.Name
		}
		if s.observe != nil {
			route := ri.route
			if route == "" {
				route = "unmatched"
			}
			s.observe(route, sw.status, time.Since(start))
		}
		s.log.LogAttrs(r.Context(), levelInfo, "request",
			attr("method", r.Method), attr("path", r.URL.Path), attrInt("status", sw.status),
			attrDur("duration", time.Since(start)), attr("principal", who), attr("requestId", ri.id))
	})
}

// recoverer turns a handler panic into a 500 problem and a log line.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "handler panic", "panic", fmt.Sprint(v), "requestId", requestID(r.Context()))
			s.writeProblem(w, r, problem.New(http.StatusInternalServerError, problem.CodeInternal, "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

// probeWriter captures what the mux would answer for an unmatched request.
type probeWriter struct {
	h      http.Header
	status int
}

func (p *probeWriter) Header() http.Header         { return p.h }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (p *probeWriter) WriteHeader(code int)        { p.status = code }

// route dispatches to the mux, rendering its 404 and 405 as problems.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		info(r.Context()).route = pattern
		s.mux.ServeHTTP(w, r)
		return
	}
	probe := &probeWriter{h: http.Header{}}
	h.ServeHTTP(probe, r)
	switch probe.status {
	case http.StatusMethodNotAllowed:
		if allow := probe.h.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		s.writeProblem(w, r, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound, 0:
		s.writeProblem(w, r, problem.NotFound("no such route"))
	default:
		h.ServeHTTP(w, r) // a redirect to the cleaned path
	}
}

// MaxHeaderBytes bounds a request's header block (the request line and
// every header line). Go's server has its own, higher, cap (the host sets
// it to HardMaxHeaderBytes) and answers past it with plain text before any
// handler runs; below that, this limit answers a problem like every other.
const (
	MaxHeaderBytes     = 64 << 10
	HardMaxHeaderBytes = 1 << 20
)

// headerSize is the size of r's header block as a client sent it, near
// enough: the request line and "Name: value\r\n" per value.
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + len(r.Host) + len("Host: \r\n")
}

// headerLimit refuses a header block over MaxHeaderBytes with 431.
func (s *Server) headerLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerSize(r); n > MaxHeaderBytes {
			s.writeProblem(w, r, problem.New(http.StatusRequestHeaderFieldsTooLarge, problem.CodeHeaderTooLarge, "the request's headers are %d bytes; at most %d are accepted", n, MaxHeaderBytes))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routeGuard runs on every matched route, as its entry rt says:
// authentication unless public, the space rule, the role and, for a body,
// the envelope.
func (s *Server) routeGuard(rt route, next http.Handler) http.Handler {
	if rt.public {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info(r.Context()).maxBody = rt.maxBody
		// A space name the Host API could never create ("*" means every
		// space in grants; "/" breaks Location) is refused before anything
		// reads it.
		if err := s.space.check(r.PathValue("space")); r.PathValue("space") != "" && err != nil {
			s.writeProblem(w, r, err)
			return
		}
		tok, ok := auth.BearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="takohost"`)
			s.writeProblem(w, r, problem.New(http.StatusUnauthorized, problem.CodeUnauthenticated, "an Authorization: Bearer <token> header is required"))
			return
		}
		p, ok := s.authn.Authenticate(tok)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="takohost", error="invalid_token"`)
			s.writeProblem(w, r, problem.New(http.StatusUnauthorized, problem.CodeUnauthenticated, "the token matches no principal"))
			return
		}
		info(r.Context()).principal = p
		if n, ok := s.authn.(ChangeNotifier); ok && longPoll(r) {
			ctx, stop := s.endOnRevoke(r.Context(), n, tok, p, r.PathValue("space"), rt.action)
			defer stop()
			r = r.WithContext(ctx)
		}
		if rt.admin {
			if !p.IsAdmin() {
				s.writeProblem(w, r, problem.Forbidden("managing principals needs an editor grant on every space (\"*\") that no Form list narrows"))
				return
			}
			if rt.body != "" {
				if err := s.readEnvelope(w, r, rt.body); err != nil {
					s.writeProblem(w, r, err)
					return
				}
			}
			next.ServeHTTP(w, r)
			return
		}
		space := r.PathValue("space")
		if !p.InSpace(space) {
			s.writeProblem(w, r, problem.NotFound("not found"))
			return
		}
		if !p.CanAny(space, rt.action) {
			s.writeProblem(w, r, problem.Forbidden("the principal may not %s in this space", rt.action))
			return
		}
		if rt.body != "" {
			if err := s.readEnvelope(w, r, rt.body); err != nil {
				s.writeProblem(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readEnvelope checks the content type, size, nesting depth and closed
// shape of a request body before the strict handler decodes it (encoding/json
// would silently drop unknown members), then hands the same bytes on.
func (s *Server) readEnvelope(w http.ResponseWriter, r *http.Request, schema string) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return invalidRequest("the request body must be application/json")
	}
	limit := int64(MaxBodyBytes)
	if n := info(r.Context()).maxBody; n > 0 {
		limit = n
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return invalidRequest("the request body is larger than %d bytes (%d MiB)", limit, limit>>20)
		}
		return invalidRequest("the request body could not be read")
	}
	if d := jsonDepth(raw); d > MaxJSONDepth {
		return invalidRequest("the request body is nested more than %d levels deep", MaxJSONDepth)
	}
	vs, err := schemas.ValidateDocument(schema, raw, "")
	if err != nil {
		if errors.Is(err, schemas.ErrNotJSON) {
			return invalidRequest("the request body is not JSON: %v", err)
		}
		return err
	}
	if len(vs) > 0 {
		return problem.FromViolations(http.StatusBadRequest, problem.CodeInvalidRequest, "the request body does not have the request's shape", vs)
	}
	info(r.Context()).body = raw
	r.Body = io.NopCloser(bytes.NewReader(raw))
	return nil
}

// jsonDepth is the deepest nesting of arrays and objects in raw, counted
// without decoding (so that a hostile document costs one pass).
func jsonDepth(raw []byte) int {
	depth, max := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				max = depth
			}
		case '}', ']':
			depth--
		}
	}
	return max
}

// ChangeNotifier is implemented by an Authenticator whose principals
// change while the host runs (*auth.Registry): Changed is closed at the
// next change.
type ChangeNotifier interface {
	Changed() <-chan struct{}
}

// errTokenRevoked ends a long poll whose token was revoked (or lost the
// grant the route needs) while it waited.
var errTokenRevoked = errors.New("the token was revoked while the request waited")

// longPoll reports whether r asks to wait (a wait query parameter other
// than 0): those requests may outlive their token.
func longPoll(r *http.Request) bool {
	w := r.URL.Query().Get("wait")
	return w != "" && w != "0"
}

// endOnRevoke returns a context that is cancelled, with errTokenRevoked as
// its cause, when a change of the principals leaves tok matching no
// principal, another one, or one that may no longer do action in space.
// stop releases the watch.
func (s *Server) endOnRevoke(parent context.Context, n ChangeNotifier, tok string, p *auth.Principal, space string, action auth.Action) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := n.Changed()
	// A change between Authenticate and Changed would be missed: check
	// once now that the channel is held.
	go func() {
		for {
			q, ok := s.authn.Authenticate(tok)
			if !ok || q.ID != p.ID || (space != "" && (!q.InSpace(space) || !q.CanAny(space, action))) || (space == "" && !q.IsAdmin() && p.IsAdmin()) {
				cancel(errTokenRevoked)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ch:
				ch = n.Changed()
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// revokedWhileWaiting is the 401 problem of a long poll whose token was
// revoked while it waited, or nil.
func revokedWhileWaiting(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errTokenRevoked) {
		return problem.New(http.StatusUnauthorized, problem.CodeUnauthenticated, "the token was revoked while the request waited")
	}
	return nil
}
