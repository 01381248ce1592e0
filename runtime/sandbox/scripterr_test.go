package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
)

// A handler's JavaScript exception crosses the sandbox boundary whole (its
// name, message and stack, for the attempt history), through the frame
// codec too; a wrapped one keeps its wrapper's text; the end of a sandbox
// is reported as such.
func TestScriptErrorCrossesTheWire(t *testing.T) {
	se := &js.ScriptError{Name: "TypeError", Message: "x is undefined", Stack: "TypeError: x is undefined\n    at queue (main.js:3:9)"}
	f := &frame{Err: toWire(se)}
	var got frame
	if err := readFrame(bufio.NewReader(bytes.NewReader(appendFrame(nil, f))), &got); err != nil {
		t.Fatal(err)
	}
	err := got.Err.err()
	class, name, msg, stack := abi.Describe(err)
	if class != abi.FailureThrown || name != se.Name || msg != se.Message || stack != se.Stack || err.Error() != se.Error() {
		t.Fatalf("got %q %q %q %q (%v)", class, name, msg, stack, err)
	}
	wrapped := toWire(fmt.Errorf("js: the invocation was cancelled: %w", se)).err()
	if wrapped.Error() != "js: the invocation was cancelled: TypeError: x is undefined" {
		t.Fatalf("wrapped: %v", wrapped)
	}
	ended := &endedError{err: fmt.Errorf("%w: it exceeded its memory cap", ErrSandboxEnded)}
	if class, _, msg, _ := abi.Describe(fmt.Errorf("invocation: %w", ended)); class != abi.FailureSandboxEnded || msg != "invocation: the worker's sandbox ended: it exceeded its memory cap" {
		t.Fatalf("ended: %q %q", class, msg)
	}
	if !errors.Is(ended, ErrSandboxEnded) {
		t.Fatal("endedError lost its sentinel")
	}
}
