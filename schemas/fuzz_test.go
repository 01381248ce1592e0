package schemas

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

var fuzzForms = []string{FormAtLeastOnceQueue, FormQueueConsumer, FormModuleWorker, FormWorkerVersion}

// FuzzValidateResource: ValidateResource never panics, fails only with
// ErrNotJSON for a known Form, and every violation points into /spec or
// /privateInputs, with a detail, sorted and without duplicates. An empty
// spec or privateInputs stands for an absent one. The committed corpus is in
// testdata/fuzz/FuzzValidateResource.
func FuzzValidateResource(f *testing.F) {
	for i, doc := range []string{validQueue, validConsumer, validModuleWorker, validWorkerVersion} {
		f.Add(uint8(i), []byte(doc), []byte(`{}`))
	}
	f.Add(uint8(3), []byte(validWorkerVersion), []byte(validSecrets))
	f.Fuzz(func(t *testing.T, form uint8, spec, pi []byte) {
		if len(spec) == 0 {
			spec = nil
		}
		if len(pi) == 0 {
			pi = nil
		}
		vs, err := ValidateResource(fuzzForms[int(form)%len(fuzzForms)], spec, pi)
		if err != nil {
			if !errors.Is(err, ErrNotJSON) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		for i, v := range vs {
			if !pointsInto(v.Pointer, "/spec") && !pointsInto(v.Pointer, "/privateInputs") {
				t.Fatalf("violation %d points at %q", i, v.Pointer)
			}
			if v.Detail == "" {
				t.Fatalf("violation %d at %q has no detail", i, v.Pointer)
			}
		}
		if !slices.IsSortedFunc(vs, compareViolations) {
			t.Fatalf("violations not sorted: %v", vs)
		}
		if len(slices.Compact(slices.Clone(vs))) != len(vs) {
			t.Fatalf("duplicate violations: %v", vs)
		}
	})
}

func pointsInto(ptr, base string) bool {
	return ptr == base || strings.HasPrefix(ptr, base+"/")
}

// TestConcurrentFirstUse: the lazy compilation and the compiled schemas are
// safe to use from many goroutines at once (run with -race).
func TestConcurrentFirstUse(t *testing.T) {
	done := make(chan []Violation)
	for i := range 8 {
		go func() {
			vs, _ := ValidateResource(fuzzForms[i%len(fuzzForms)], []byte(`{"maxBatchSize":5.0}`), nil)
			done <- vs
		}()
	}
	for range 8 {
		if vs := <-done; len(vs) == 0 {
			t.Fatal("want violations")
		}
	}
}
