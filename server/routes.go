package server

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/schemas"
)

// route is what the route guard needs to know of one route: whether it is
// public, the role it needs and the schema of its request body. Every
// entry comes from the OpenAPI document (spec/openapi.yaml): an
// operation's security and its x-takohost-action and x-takohost-body
// members, and the document's x-takohost-routes for the routes OpenAPI
// cannot express.
type route struct {
	public bool
	// admin: the principal must be an administrator (auth.Principal.IsAdmin);
	// the route has no space.
	admin  bool
	action auth.Action
	body   string // a schema of schemas/, "" for none
	// maxBody is the route's x-takohost-max-body: the most bytes its
	// request body may have, MaxBodyBytes when 0.
	maxBody int64
}

// routesFromOpenAPI reads the route table, keyed by ServeMux pattern
// ("GET /v2/spaces/{space}/resources", or a bare path for any method).
func routesFromOpenAPI(doc map[string]any) (map[string]route, error) {
	out := map[string]route{}
	var errs []string
	paths, _ := doc["paths"].(map[string]any)
	for path, v := range paths {
		item, _ := v.(map[string]any)
		for method, v := range item {
			op, ok := v.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			key := strings.ToUpper(method) + " " + path
			rt, err := routeOf(op)
			if err != nil {
				errs = append(errs, key+": "+err.Error())
				continue
			}
			out[key] = rt
		}
	}
	extra, _ := doc["x-takohost-routes"].([]any)
	for _, v := range extra {
		m, _ := v.(map[string]any)
		pattern, _ := m["pattern"].(string)
		rt, err := routeOf(m)
		if pattern == "" || err != nil {
			errs = append(errs, fmt.Sprintf("x-takohost-routes entry %v: a pattern and an action are required", m))
			continue
		}
		out[pattern] = rt
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("server: the OpenAPI document's route guard entries: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

func routeOf(op map[string]any) (route, error) {
	var rt route
	if sec, ok := op["security"].([]any); ok && len(sec) == 0 {
		rt.public = true
	}
	switch a, _ := op["x-takohost-action"].(string); a {
	case "read":
		rt.action = auth.Read
	case "write":
		rt.action = auth.Write
	case "admin":
		rt.action, rt.admin = auth.Write, true
	case "publish":
		rt.action = auth.Publish
	case "consume":
		rt.action = auth.Consume
	case "":
		if !rt.public {
			return route{}, fmt.Errorf("no x-takohost-action and not public (security: [])")
		}
	default:
		return route{}, fmt.Errorf("x-takohost-action %q is not read, write, publish, consume or admin", a)
	}
	rt.body, _ = op["x-takohost-body"].(string)
	if n, ok := op["x-takohost-max-body"].(float64); ok {
		if n < 1 || n > 64<<20 {
			return route{}, fmt.Errorf("x-takohost-max-body %v is not 1..%d", n, 64<<20)
		}
		rt.maxBody = int64(n)
	}
	if rt.body != "" {
		if _, err := schemas.ValidateDocument(rt.body, []byte(`{}`), ""); err != nil {
			return route{}, fmt.Errorf("x-takohost-body %q: %w", rt.body, err)
		}
	}
	return rt, nil
}

// guardedMux mounts every handler behind the guard of its route, and
// remembers the patterns that have no entry so that New refuses to start.
type guardedMux struct {
	*http.ServeMux
	s       *Server
	routes  map[string]route
	missing []string
}

func (m *guardedMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

func (m *guardedMux) Handle(pattern string, h http.Handler) {
	rt, ok := m.routes[pattern]
	if !ok {
		m.missing = append(m.missing, pattern)
		return
	}
	m.ServeMux.Handle(pattern, m.s.routeGuard(rt, h))
}

// nameRule is the rule a path parameter's value must meet: the length and
// pattern of its schema in the OpenAPI document (components.parameters).
type nameRule struct {
	param    string
	min, max int
	re       *regexp.Regexp
}

func paramRule(doc map[string]any, param string) (*nameRule, error) {
	comps, _ := doc["components"].(map[string]any)
	params, _ := comps["parameters"].(map[string]any)
	p, _ := params[param].(map[string]any)
	schema, _ := p["schema"].(map[string]any)
	pattern, _ := schema["pattern"].(string)
	minLen, _ := schema["minLength"].(float64)
	maxLen, _ := schema["maxLength"].(float64)
	if pattern == "" || maxLen == 0 {
		return nil, fmt.Errorf("server: the OpenAPI document's %q parameter has no pattern and maxLength", param)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("server: the OpenAPI document's %q parameter pattern: %w", param, err)
	}
	return &nameRule{param: param, min: int(minLen), max: int(maxLen), re: re}, nil
}

// check refuses a value the rule does not allow, quoting at most 64 bytes
// of it.
func (n *nameRule) check(v string) error {
	if len(v) >= n.min && len(v) <= n.max && n.re.MatchString(v) {
		return nil
	}
	shown := v
	if len(shown) > 64 {
		shown = shown[:64] + "…"
	}
	return invalidRequest("the %s name %q is not valid: %d to %d characters of %s", n.param, shown, n.min, n.max, n.re.String())
}
