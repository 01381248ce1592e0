package main

import "testing"

// The committed console/dist is what console/web builds to, byte for byte
// (the drift check; `make console` rebuilds it).
func TestDistIsBuiltFromWeb(t *testing.T) {
	want, err := build("..")
	if err != nil {
		t.Fatal(err)
	}
	if diffs := compare("../dist", want); len(diffs) > 0 {
		t.Fatalf("console/dist is not what console/web builds to (run `make console`): %v", diffs)
	}
}
