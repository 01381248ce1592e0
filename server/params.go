package server

import (
	"errors"
	"net/http"

	api "github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
)

// paramTypes maps each query parameter name of the OpenAPI document to its
// schema type ("integer", "boolean", ...), for the problems that name it.
func paramTypes(doc map[string]any) map[string]string {
	out := map[string]string{}
	paths, _ := doc["paths"].(map[string]any)
	for _, v := range paths {
		item, _ := v.(map[string]any)
		for _, v := range item {
			op, _ := v.(map[string]any)
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				m, _ := p.(map[string]any)
				name, _ := m["name"].(string)
				schema, _ := m["schema"].(map[string]any)
				if t, _ := schema["type"].(string); name != "" && t != "" {
					out[name] = t
				}
			}
		}
	}
	return out
}

// paramProblem says which parameter of the request is wrong and what it
// must be, in the Host API's words rather than the generated parser's.
func (s *Server) paramProblem(err error) *problem.Problem {
	var (
		format   *api.InvalidParamFormatError
		required *api.RequiredParamError
		many     *api.TooManyValuesForParamError
		header   *api.RequiredHeaderError
		unmarsh  *api.UnmarshalingParamError
	)
	switch {
	case errors.As(err, &format):
		return invalidRequest("the parameter %q %s", format.ParamName, s.mustBe(format.ParamName))
	case errors.As(err, &unmarsh):
		return invalidRequest("the parameter %q %s", unmarsh.ParamName, s.mustBe(unmarsh.ParamName))
	case errors.As(err, &required):
		return invalidRequest("the parameter %q is required", required.ParamName)
	case errors.As(err, &header):
		return invalidRequest("the header %q is required", header.ParamName)
	case errors.As(err, &many):
		return invalidRequest("the parameter %q is given %d times; give it once", many.ParamName, many.Count)
	}
	return invalidRequest("the request's parameters are not valid")
}

func (s *Server) mustBe(name string) string {
	switch s.params[name] {
	case "integer":
		return "must be a decimal integer"
	case "boolean":
		return "must be true or false"
	}
	return "is not valid"
}

// canonicalIntegers refuses an integer query parameter that is not written
// the one way the Host API writes integers: decimal digits without a
// leading zero or a plus sign, "-" only before a non-zero value. The
// generated parser (strconv) reads "-0" and "007" as 0 and 7, so a request
// could carry a value the host never writes back (#14). The fetch route's
// query belongs to the worker and is not checked.
func (s *Server) canonicalIntegers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for name, vals := range r.URL.Query() {
			if s.params[name] != "integer" {
				continue
			}
			for _, v := range vals {
				if !canonicalInteger(v) {
					s.writeProblem(w, r, invalidRequest("the parameter %q must be a decimal integer written without a sign, leading zeros or -0 (a negative value starts with - and a non-zero digit)", name))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// canonicalInteger reports whether v is 0 or an optional "-" followed by
// a non-zero digit and digits.
func canonicalInteger(v string) bool {
	if v == "0" {
		return true
	}
	if len(v) > 0 && v[0] == '-' {
		v = v[1:]
	}
	if v == "" || v[0] < '1' || v[0] > '9' {
		return false
	}
	for i := 1; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}
