// Package schemas embeds the JSON Schema files of this directory, compiles
// them once, and validates request documents against them, reporting every
// problem as a [Violation]: an RFC 6901 JSON Pointer into the request body and
// a human sentence.
//
// # Why the keyword subset
//
// The *.json files are the single source of every shape. spec/openapi.yaml
// references them and tools/specbundle internalises them as OpenAPI 3.0
// components, so they are written in the keyword subset that both JSON
// Schema 2020-12 and OpenAPI 3.0 understand: type, properties, required,
// additionalProperties, minimum/maximum, minLength/maxLength, pattern, enum,
// items, minItems/maxItems, uniqueItems, maxProperties and relative file
// $refs. They carry no $schema and no $id (OpenAPI 3.0 would reject them);
// this package compiles them with JSON Schema 2020-12 as the default draft,
// each file registered under a stable URL (schemaBase + file name) so that
// relative $refs such as "reference.json" resolve to the embedded files and
// nothing is ever fetched.
//
// What the subset cannot say is checked here, in Go, in one place each:
//
//   - the integer rule (below);
//   - duplicate members of a JSON object (rejected by the decoder);
//   - for WorkerVersion 0.5.0, in [ValidateResource]: mainModule names one of
//     modules, module names are unique, var and secret names are JavaScript
//     identifiers (OpenAPI 3.0 has no propertyNames), queueProducerBindings
//     names are unique, and binding, var and secret names share one
//     namespace;
//   - for Forms without private inputs, a non-empty privateInputs is refused
//     with one violation at /privateInputs.
//
// # The integer rule
//
// JSON Schema calls 5.0 an integer; the contract does not: an integer in a
// request is a JSON number written without fraction or exponent, so "5",
// 5.5, 5.0 and 5e0 are all refused. Documents are decoded with every number
// kept as its json.Number literal, and after the schema validator has run, a
// single walker goes over the compiled schema (following $ref, properties,
// additionalProperties and items) alongside the instance and checks the
// literal wherever the schema's type is integer and not number. Values that
// were decoded elsewhere (float64, int64, as the JavaScript runtime exports
// them) have no literal; for them only the schema's own rule applies, which
// matches JavaScript, where 5 and 5.0 are the same value.
//
// # How pointers are made
//
// A pointer is base (for example "/spec") followed by the instance location,
// each token escaped as RFC 6901 requires ("~" as "~0", "/" as "~1"). Where
// the validator reports a problem at an object, the pointer names the member
// concerned instead: an unknown member ("unknown field \"foo\" is not
// allowed") and a missing required member ("required field \"queue\" is
// missing") point at /spec/foo and /spec/queue, a duplicate member at its
// second occurrence, a repeated array item at the later copy. A scalar that
// breaks several keywords at once (a 65-character name breaking maxLength
// and pattern) yields one violation describing the whole constraint ("must be
// a string of 1 to 64 characters matching ..."). Violations are sorted by
// pointer (token by token, array indexes numerically) and then by detail.
// Details never repeat an instance value, only member names, so a secret's
// value cannot leak into a problem document.
package schemas
