// Package features embeds the conformance kit's Gherkin features and test
// workers so that the runner (tools/conform) carries them wherever it is
// built. The step definitions live in features/steps.
package features

import "embed"

// FS holds every *.feature file and workers/*.js.
//
//go:embed *.feature workers/*.js
var FS embed.FS
