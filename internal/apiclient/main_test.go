package apiclient_test

import (
	"os"
	"testing"

	"github.com/takoform/queuehost/runtime/sandbox"
)

// TestMain lets this test binary be the worker sandbox of the host it
// starts.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
