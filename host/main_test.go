package host

import (
	"os"
	"testing"

	"github.com/takoform/queuehost/runtime/sandbox"
)

// TestMain lets this test binary be the worker sandbox the hosts it starts
// run.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
