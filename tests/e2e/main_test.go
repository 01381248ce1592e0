package e2e

import (
	"github.com/takoform/queuehost/runtime/sandbox"
	"os"
	"testing"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestMain removes the host binary the tests built, so that a run leaves
// nothing behind in the temporary directory.
func TestMain(m *testing.M) {
	sandbox.Main() // TestHostileWorkers... and the fuzz target start hosts in this binary
	code := m.Run()
	harness.RemoveBuild()
	os.Exit(code)
}
