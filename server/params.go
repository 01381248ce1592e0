package server

import (
	"errors"

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
