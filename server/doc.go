// Package server is the Host API v2 over HTTP, behind the generated strict
// interface (gen/api): authentication, the route guard, problems, headers
// and the translation between the API's shapes and the controller
// (controller/), which owns admission, Operations and observation.
//
// # Why the server is thin
//
// Everything a Form means lives in the controller's Form registry, so that
// adding a Form touches no file here. What stays is what only HTTP has: the
// bearer token, the request ID and access log, the header and body limits,
// the closed request envelopes, the Idempotency-Key header and its scope,
// the long-poll wait, and one place that renders every problem
// (writeProblem), whatever produced it.
package server
