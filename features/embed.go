// Package features embeds the conformance kit's Gherkin features and test
// workers so that the runner (tools/conform) carries them wherever it is
// built. The step definitions live in features/steps.
package features

import "embed"

// Version is the conformance kit's version, written into every results
// bundle. Raise it when a scenario's assertions change.
const Version = "0.4.0"

// FS holds every *.feature file, workers/*.js, the Forms' sentence lists
// (sentences/*.txt) and the capabilities document's schema.
//
//go:embed *.feature workers/*.js sentences/*.txt capabilities.schema.json
var FS embed.FS
