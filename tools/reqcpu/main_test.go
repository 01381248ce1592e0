package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// treeCPU counts a process's reaped children (a sandbox that ended during
// the measurement) as well as the process itself; a child's CPU must not
// be lost, or a sandboxed host would look cheaper than it is.
func TestTreeCPUCountsChildren(t *testing.T) {
	before := treeCPU(os.Getpid())
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if child < 50*time.Millisecond {
		t.Skipf("the child used %s of CPU, too little to tell at USER_HZ", child)
	}
	if got := treeCPU(os.Getpid()) - before; got < child-20*time.Millisecond {
		t.Fatalf("treeCPU grew by %s over a child that used %s", got, child)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{1, 2, 10}, 2}, {[]float64{1, 2, 4, 10}, 3}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
