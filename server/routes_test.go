package server

import (
	"strings"
	"testing"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/schemas"
)

// The route table comes from the OpenAPI document: the public route, the
// roles and the body schemas are what spec/openapi.yaml says.
func TestRoutesComeFromTheOpenAPIDocument(t *testing.T) {
	h := newHarness(t, nil)
	routes, err := routesFromOpenAPI(h.srv.openapi)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]route{
		"GET /v2/openapi.json":                                            {public: true},
		"GET /v2/capabilities":                                            {public: true},
		"GET /healthz":                                                    {public: true},
		"GET /readyz":                                                     {public: true},
		"GET /v2/spaces/{space}/resources":                                {action: auth.Read},
		"POST /v2/spaces/{space}/resources":                               {action: auth.Write, body: schemas.SchemaCreateResourceRequest},
		"PUT /v2/spaces/{space}/resources/{uid}":                          {action: auth.Write, body: schemas.SchemaUpdateResourceRequest},
		"DELETE /v2/spaces/{space}/resources/{uid}":                       {action: auth.Write},
		"GET /v2/spaces/{space}/resources/{uid}/logs":                     {action: auth.Read},
		"/v2/spaces/{space}/resources/{uid}/fetch/{path...}":              {action: auth.Write},
		"GET /v2/spaces/{space}/operations":                               {action: auth.Read},
		"GET /v2/spaces/{space}/operations/{id}":                          {action: auth.Read},
		"/v2/spaces/{space}/resources/{uid}/fetch":                        {action: auth.Write},
		"GET /v2/spaces/{space}/resources/{uid}":                          {action: auth.Read},
		"GET /v2/spaces/{space}/resources/{uid}/delivery":                 {action: auth.Read},
		"PUT /v2/spaces/{space}/resources/{uid}/delivery":                 {action: auth.Write, body: "queue-delivery-request.json"},
		"GET /v2/spaces/{space}/resources/{uid}/stats":                    {action: auth.Read},
		"GET /v2/spaces/{space}/resources/{uid}/messages":                 {action: auth.Read},
		"POST /v2/spaces/{space}/resources/{uid}/messages":                {action: auth.Publish, body: "publish-request.json", maxBody: 24 << 20},
		"POST /v2/spaces/{space}/resources/{uid}/purge":                   {action: auth.Write},
		"POST /v2/spaces/{space}/resources/{uid}/leases":                  {action: auth.Consume, body: "pull-request.json"},
		"POST /v2/spaces/{space}/resources/{uid}/leases/{leaseId}/settle": {action: auth.Consume, body: "pull-settle-request.json"},
		"POST /v2/spaces/{space}/resources/{uid}/leases/{leaseId}/extend": {action: auth.Consume, body: "pull-extend-request.json"},
		"POST /v2/spaces/{space}/resources/{uid}/redrive":                 {action: auth.Write, body: "queue-redrive-request.json"},
		"POST /v2/spaces/{space}/operations/{id}/cancel":                  {action: auth.Write},
		"GET /v2/spaces/{space}/resources/{uid}/invocations":              {action: auth.Read},
		"GET /v2/spaces/{space}/resources/{uid}/history":                  {action: auth.Read},
		"GET /v2/spaces/{space}/resources/{uid}/deadletters/groups":       {action: auth.Read},
		"GET /console/":                     {public: true},
		"GET /console":                      {public: true},
		"GET /v2/principals":                {admin: true, action: auth.Write},
		"POST /v2/principals":               {admin: true, action: auth.Write, body: "principal-create-request.json"},
		"DELETE /v2/principals/{principal}": {admin: true, action: auth.Write},
	}
	if len(routes) != len(want) {
		t.Fatalf("%d routes, want %d: %v", len(routes), len(want), routes)
	}
	for k, w := range want {
		if routes[k] != w {
			t.Errorf("%s: %+v, want %+v", k, routes[k], w)
		}
	}
}

// An operation with neither an action nor security: [] is refused, and so
// is a route the server mounts without an entry.
func TestARouteWithoutAnEntryIsRefused(t *testing.T) {
	doc := map[string]any{"paths": map[string]any{"/x": map[string]any{"get": map[string]any{"operationId": "x"}}}}
	if _, err := routesFromOpenAPI(doc); err == nil || !strings.Contains(err.Error(), "GET /x") {
		t.Fatalf("got %v", err)
	}
	doc = map[string]any{"paths": map[string]any{"/x": map[string]any{"get": map[string]any{"x-takohost-action": "own"}}}}
	if _, err := routesFromOpenAPI(doc); err == nil {
		t.Fatal("an unknown action was accepted")
	}
	doc = map[string]any{"paths": map[string]any{"/x": map[string]any{"post": map[string]any{"x-takohost-action": "write", "x-takohost-body": "nope.json"}}}}
	if _, err := routesFromOpenAPI(doc); err == nil {
		t.Fatal("an unknown body schema was accepted")
	}
	m := &guardedMux{routes: map[string]route{}}
	m.HandleFunc("GET /y", nil)
	if len(m.missing) != 1 || m.missing[0] != "GET /y" {
		t.Fatalf("missing %v", m.missing)
	}
}

// A space name the Host API could never create is refused on every route
// with {space}, before authentication and before anything reads it: "*"
// (every space, in grants), "/" (its Location would not resolve), NUL,
// U+202E, upper case and 64+ characters (#14).
func TestSpaceNamesFollowTheOpenAPIParameter(t *testing.T) {
	h := newHarness(t, nil)
	for _, bad := range []string{"%2A", "a%2Fb", "a%00b", "a%E2%80%AEb", "ABC", "-a", "a-", strings.Repeat("a", 64), strings.Repeat("a", 5000)} {
		for _, route := range []string{res(bad), res(bad) + "/u1", "/v2/spaces/" + bad + "/operations/op1", res(bad) + "/u1/fetch/x"} {
			r := h.do("GET", route, tAdmin, nil)
			h.expect(r, 400, "invalid_request")
			if !strings.Contains(r.str("detail"), "space name") {
				t.Errorf("GET %.80s: detail %q does not name the space", route, r.str("detail"))
			}
			if d := r.str("detail"); len(d) > 300 {
				t.Errorf("GET %.80s: a %d-byte detail echoes the whole name", route, len(d))
			}
		}
	}
	// The longest and shortest valid names pass the rule (an empty space of
	// the admin's grant lists nothing).
	for _, ok := range []string{"a", "0-z", strings.Repeat("a", 63)} {
		h.expect(h.do("GET", res(ok), tAdmin, nil), 200, "")
	}
}

// A malformed query parameter is named in the Host API's words, never in
// the generated parser's (#14).
func TestQueryParameterProblems(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct{ query, want string }{
		{"?limit=abc", `the parameter "limit" must be a decimal integer`},
		{"?limit=1e3", `the parameter "limit" must be a decimal integer`},
		{"?limit=1&limit=2", `the parameter "limit"`},
		// strconv reads these as 0 and 7: refused, not normalised.
		{"?limit=-0", `the parameter "limit" must be a decimal integer`},
		{"?limit=007", `the parameter "limit" must be a decimal integer`},
		{"?limit=+5", `the parameter "limit" must be a decimal integer`},
	} {
		r := h.do("GET", res("s1")+c.query, tAdmin, nil)
		h.expect(r, 400, "invalid_request")
		d := r.str("detail")
		if !strings.Contains(d, c.want) || strings.Contains(d, "strconv") || strings.Contains(d, "parsing") {
			t.Errorf("%s: detail %q, want it to say %q in the API's words", c.query, d, c.want)
		}
	}
	// The logs route's after and wait, and an Operation's wait, alike.
	w, _ := h.worker("s1", "w")
	for _, path := range []string{res("s1") + "/" + w + "/logs?after=-0", res("s1") + "/" + w + "/logs?wait=-0", "/v2/spaces/s1/operations/op-x?wait=00"} {
		r := h.do("GET", path, tAdmin, nil)
		h.expect(r, 400, "invalid_request")
		if d := r.str("detail"); !strings.Contains(d, "must be a decimal integer") {
			t.Errorf("%s: detail %q", path, d)
		}
	}
	// Canonical values still pass, and the fetch route's query is the
	// worker's business.
	h.expect(h.do("GET", res("s1")+"/"+w+"/logs?after=0&limit=10&wait=0", tAdmin, nil), 200, "")
	h.expect(h.do("GET", res("s1")+"?limit=500", tAdmin, nil), 200, "")
	r := h.do("DELETE", res("s1")+"/nope?ifIdle=maybe", tAdmin, nil)
	h.expect(r, 400, "invalid_request")
	if d := r.str("detail"); !strings.Contains(d, `"ifIdle" must be true or false`) {
		t.Errorf("ifIdle=maybe: detail %q", d)
	}
}
