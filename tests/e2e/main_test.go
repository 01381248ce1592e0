package e2e

import (
	"os"
	"testing"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestMain removes the host binary the tests built, so that a run leaves
// nothing behind in the temporary directory.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuild()
	os.Exit(code)
}
