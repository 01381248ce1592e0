package membudget

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSharesAndTotal(t *testing.T) {
	b := New(Limits{Total: 100, PerPrincipal: 60, PerWorker: 40})
	a1 := Holder{Principal: "a", Worker: "w1"}
	r1, err := b.Reserve(a1, 40)
	if err != nil {
		t.Fatal(err)
	}
	// The worker's share is used up; another worker of the same principal fits.
	var busy *BusyError
	if _, err := b.Reserve(a1, 1); !errors.As(err, &busy) || busy.Share != "worker" || !errors.Is(err, ErrBusy) {
		t.Fatalf("over the worker's share: %v", err)
	}
	r2, err := b.Reserve(Holder{Principal: "a", Worker: "w2"}, 20)
	if err != nil {
		t.Fatal(err)
	}
	// The principal's share is used up; another principal fits.
	if _, err := b.Reserve(Holder{Principal: "a", Worker: "w3"}, 1); !errors.As(err, &busy) || busy.Share != "principal" {
		t.Fatalf("over the principal's share: %v", err)
	}
	r3, err := b.Reserve(Holder{Principal: "b", Worker: "w4"}, 40)
	if err != nil {
		t.Fatal(err)
	}
	// The host's total is used up.
	if _, err := b.Reserve(Holder{Principal: "c", Worker: "w5"}, 1); !errors.As(err, &busy) || busy.Share != "host" {
		t.Fatalf("over the total: %v", err)
	}
	// Never fits: too large, not busy.
	if _, err := b.Reserve(Holder{Principal: "c", Worker: "w5"}, 41); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBusy) {
		t.Fatalf("larger than a share: %v", err)
	}
	if b.Used() != 100 || b.Peak() != 100 || b.Refused() != 4 {
		t.Fatalf("used %d peak %d refused %d", b.Used(), b.Peak(), b.Refused())
	}
	r1.Release()
	r1.Release() // twice is once
	if b.Used() != 60 {
		t.Fatalf("after a release: %d", b.Used())
	}
	// Growing: within the share, then over it (what it holds stays).
	if err := r2.Grow(20); err != nil {
		t.Fatal(err)
	}
	if err := r2.Grow(1); !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrBusy) {
		t.Fatalf("grow over the share: %v", err)
	}
	if r2.Size() != 40 || b.Used() != 80 {
		t.Fatalf("size %d used %d", r2.Size(), b.Used())
	}
	r2.Release()
	r3.Release()
	if b.Used() != 0 || len(b.principals) != 0 || len(b.workers) != 0 {
		t.Fatalf("all released: used %d, %v %v", b.Used(), b.principals, b.workers)
	}
	// A nil budget reserves without limit.
	var nb *Budget
	r, err := nb.Reserve(a1, 1<<40)
	if err != nil || r.Size() != 1<<40 {
		t.Fatal(err)
	}
	r.Release()
}

func TestCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// v2: the group's own limit is "max", its parent's 1 GiB.
	v2 := filepath.Join(dir, "v2")
	write(filepath.Join(v2, "a", "memory.max"), "1073741824\n")
	write(filepath.Join(v2, "a", "b", "memory.max"), "max\n")
	write(filepath.Join(dir, "cg2"), "0::/a/b\n")
	write(filepath.Join(dir, "mi2"), "30 1 0:26 / "+v2+" rw,nosuid - cgroup2 cgroup2 rw\n")
	if n, where := cgroupLimit(filepath.Join(dir, "cg2"), filepath.Join(dir, "mi2")); n != 1<<30 || where != filepath.Join(v2, "a", "memory.max") {
		t.Fatalf("v2: %d %s", n, where)
	}
	// v1: the memory hierarchy, "no limit" as a huge number at the root.
	v1 := filepath.Join(dir, "v1")
	write(filepath.Join(v1, "memory.limit_in_bytes"), "9223372036854771712\n")
	write(filepath.Join(v1, "x", "memory.limit_in_bytes"), "536870912\n")
	write(filepath.Join(dir, "cg1"), "4:memory:/x\n1:cpu:/\n0::/\n")
	write(filepath.Join(dir, "mi1"), "40 1 0:30 / "+v1+" rw - cgroup cgroup rw,memory\n")
	if n, _ := cgroupLimit(filepath.Join(dir, "cg1"), filepath.Join(dir, "mi1")); n != 512<<20 {
		t.Fatalf("v1: %d", n)
	}
	// None.
	write(filepath.Join(v1, "y", "memory.limit_in_bytes"), "9223372036854771712\n")
	write(filepath.Join(dir, "cg3"), "4:memory:/y\n")
	if n, _ := cgroupLimit(filepath.Join(dir, "cg3"), filepath.Join(dir, "mi1")); n != 0 {
		t.Fatalf("no limit: %d", n)
	}
	if n, why := DefaultHostMemory(); n < MinHostMemory || why == "" {
		t.Fatalf("default %d %q", n, why)
	}
}
