// Package hostapi is how the conformance kit talks to a host, and how the
// host's own tests do: the Host API client (bearer token, requests built by
// the client generated from the OpenAPI bundle, Do for what a conformance
// test must send that a generated client would not, problem decoding), the
// checks of an Operation's answer and its waiting, and the inbox that test
// workers report to.
//
// It imports only the contract's generated code (gen/api), never the
// reference host's rules: it is the part of a test of another host that
// this host's tests share (internal/apiclient wraps it), so the two cannot
// drift. The wire types are the contract's: Problem is gen/api's, and an
// Operation ends (Terminal) when it succeeded or failed; reconciling is
// unresolved (spec/host-api.md §Operations: a reconciling Operation answers
// with Retry-After and still holds its resource).
package hostapi
