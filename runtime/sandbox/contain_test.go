package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sandboxOf starts (with a trivial fetch) and returns the sandbox of a
// new worker in p.
func sandboxOf(t *testing.T, p *Pool, name string) *proc {
	t.Helper()
	v := worker(name, `export default { fetch() { return new Response("ok"); } };`)
	if _, err := p.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w/x", nil), "x"); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	pr := p.procs["w:"+v.WorkerUID]
	p.mu.Unlock()
	if pr == nil {
		t.Fatal("no sandbox for the worker")
	}
	return pr
}

// selfTestOf asks the sandbox to try what its containment refuses (args:
// selfTest's, beside the connect address and the host's pid).
func selfTestOf(t *testing.T, pr *proc, connectTo string, args ...string) map[string]string {
	t.Helper()
	args = append([]string{"connect=" + connectTo, "hostpid=" + strconv.Itoa(os.Getpid())}, args...)
	r, err := pr.c.call(t.Context(), &frame{Op: opSelfTest, IDs: args})
	if err != nil {
		t.Fatal(err)
	}
	if r.Err != nil {
		t.Fatal(r.Err.err())
	}
	out := map[string]string{}
	for _, line := range r.IDs {
		what, res, _ := strings.Cut(line, ": ")
		out[what] = res
	}
	return out
}

func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cgroupsExpected: on a host running as root where the v1 memory
// hierarchy or a v2 one with the memory controller is mounted, the pool
// must make cgroups (a test that would skip there fails instead).
func cgroupsExpected() bool {
	if os.Geteuid() != 0 {
		return false
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		return true
	}
	b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
	return strings.Contains(string(b), "memory")
}

var refused = []string{"exec", "create", "open", "socket", "connect", "fork", "signal the host", "ptrace", "set RLIMIT_AS", "map executable memory", "unshare"}

// Code running in a sandbox (here the sandbox's own Go code, as if worker
// code had escaped goja) can exec nothing, open no file, make no socket,
// connect nowhere, fork, signal or trace no other process, change no limit
// and map no executable memory: each answers EPERM from the seccomp
// filter. The same attempts in a sandbox without the filter succeed or
// fail otherwise, so the test sees the filter, not the attempts failing
// for another reason. From the host's side: Seccomp 2 (filter) and
// NoNewPrivs 1 in /proc/<pid>/status, the sandbox in its own network
// namespace and in its own cgroup with the pool's caps, and that cgroup
// removed with the sandbox.
func TestContainment(t *testing.T) {
	addr := liveTCPPort(t)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"contained", Options{selfTest: true, MaxTasks: 77}},
		{"seccomp-only", Options{selfTest: true, noNetNS: true, noCgroup: true}},
		// What a host not running as root does (here forced while root).
		{"userns", Options{selfTest: true, userNS: true, noCgroup: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t, c.o)
			ct, _ := p.Containment()
			if !ct.Seccomp {
				t.Fatalf("no seccomp on this machine: %v", ct.Notes)
			}
			pr := sandboxOf(t, p, c.name)
			pid := pr.cmd.Process.Pid
			if got := statusField(t, pid, "Seccomp"); got != "2" {
				t.Errorf("Seccomp: %q, want 2 (filter)", got)
			}
			if got := statusField(t, pid, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs: %q, want 1", got)
			}
			got := selfTestOf(t, pr, addr)
			for _, what := range refused {
				if got[what] != "operation not permitted" {
					t.Errorf("%s: %q, want operation not permitted", what, got[what])
				}
			}
			// The sandbox still serves.
			if _, err := p.Fetch(t.Context(), worker(c.name, `export default { fetch() { return new Response("ok"); } };`), httptest.NewRequest("GET", "http://w/x", nil), "x"); err != nil {
				t.Fatal(err)
			}

			myNet, _ := os.Readlink("/proc/self/ns/net")
			itsNet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				t.Fatal(err)
			}
			if ct.NetNS != (myNet != itsNet) {
				t.Errorf("Containment.NetNS %v, but the sandbox's network namespace is %s and the host's %s", ct.NetNS, itsNet, myNet)
			}
			if c.name == "contained" && os.Geteuid() == 0 && !ct.NetNS {
				t.Errorf("running as root, no network namespace: %v", ct.Notes)
			}
			// The jail (jail_linux.go, TestJail), also in the user
			// namespace of an unprivileged host.
			myMnt, _ := os.Readlink("/proc/self/ns/mnt")
			itsMnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
			if ct.Jail != (myMnt != itsMnt) || os.Geteuid() == 0 && !ct.Jail {
				t.Errorf("Containment.Jail %v (%v), but the sandbox's mount namespace is %s and the host's %s", ct.Jail, ct.Notes, itsMnt, myMnt)
			}
			if got := statusField(t, pid, "CapEff"); ct.Jail && got != "0000000000000000" {
				t.Errorf("CapEff %s in the jail", got)
			}
			myUser, _ := os.Readlink("/proc/self/ns/user")
			itsUser, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
			if ct.UserNS != (myUser != itsUser) || c.name == "userns" && !(ct.UserNS && ct.NetNS) {
				t.Errorf("Containment %+v, but the sandbox's user namespace is %s and the host's %s", ct, itsUser, myUser)
			}

			if c.name != "contained" {
				if c.name == "userns" {
					// The sandbox sees its own ids, mapped to themselves.
					if got := statusField(t, pid, "Uid"); !strings.HasPrefix(got, strconv.Itoa(os.Geteuid())+"\t") {
						t.Errorf("Uid: %q", got)
					}
				}
				if ct.Cgroup != "" || pr.cg != nil {
					t.Fatalf("cgroup %q with noCgroup", ct.Cgroup)
				}
				return
			}
			if ct.Cgroup == "" {
				if cgroupsExpected() {
					t.Fatalf("no cgroup, but this host can make them: %v", ct.Notes)
				}
				t.Skipf("no cgroups here: %v", ct.Notes)
			}
			if pr.cg == nil {
				t.Fatal("the sandbox has no cgroup")
			}
			memDir := pr.cg.dirs[0]
			membership := procCgroups(pid)
			for _, d := range pr.cg.dirs {
				// The directory's path under its mount is the sandbox's
				// path in that hierarchy.
				rel := d[strings.Index(d, "/takohost-"):]
				if !strings.Contains(membership, rel+"\n") {
					t.Errorf("the sandbox is not in %s: /proc/%d/cgroup:\n%s", d, pid, membership)
				}
			}
			if !strings.Contains(memDir, fmt.Sprintf("/takohost-%d-", os.Getpid())) {
				t.Errorf("the cgroup %s is not the host's", memDir)
			}
			limFile := "memory.max"
			if ct.Cgroup == "v1" {
				limFile = "memory.limit_in_bytes"
			}
			if b, _ := os.ReadFile(filepath.Join(memDir, limFile)); strings.TrimSpace(string(b)) != strconv.Itoa(192<<20) {
				t.Errorf("%s: %q, want %d", limFile, b, 192<<20)
			}
			if ct.CgroupPids {
				pidsDir := pr.cg.dirs[len(pr.cg.dirs)-1]
				if b, _ := os.ReadFile(filepath.Join(pidsDir, "pids.max")); strings.TrimSpace(string(b)) != "77" {
					t.Errorf("pids.max: %q, want 77", b)
				}
			}
			// The group goes with the sandbox, the pool's parent with the pool.
			p.reapIdle(time.Now().Add(time.Hour))
			<-pr.exited
			for _, d := range pr.cg.dirs {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after the sandbox ended: %v", d, err)
				}
			}
			p.Close()
			for _, d := range pr.cg.t.parents {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after Close: %v", d, err)
				}
			}
		})
	}
}

// Without the filter the same attempts are not refused with EPERM (so
// TestContainment sees the filter, not something else failing).
func TestSelfTestWithoutContainment(t *testing.T) {
	addr := liveTCPPort(t)
	p := newPool(t, Options{selfTest: true, noSeccomp: true, noNetNS: true, noCgroup: true, noJail: true})
	pr := sandboxOf(t, p, "bare")
	if got := statusField(t, pr.cmd.Process.Pid, "Seccomp"); got != "0" {
		t.Fatalf("Seccomp: %q, want 0", got)
	}
	got := selfTestOf(t, pr, addr)
	t.Logf("%v", got)
	for _, what := range refused {
		if got[what] == "operation not permitted" || got[what] == "" {
			t.Errorf("%s: %q without the filter", what, got[what])
		}
	}
}

// A worker that holds more and more memory, with the RSS watchdog off, is
// killed by the kernel at its cgroup's memory cap: the invocation fails
// with "memory cap", the worker's log says so, the end is counted as
// memory, the host goes on and the worker's next invocation gets a fresh
// sandbox.
func TestCgroupMemoryCap(t *testing.T) {
	p := newPool(t, Options{MemoryLimit: 128 << 20, noWatchdog: true, InvocationTimeout: 30 * time.Second})
	ct, _ := p.Containment()
	if ct.Cgroup == "" {
		if cgroupsExpected() {
			t.Fatalf("no cgroup, but this host can make them: %v", ct.Notes)
		}
		t.Skipf("no cgroups here: %v", ct.Notes)
	}
	hog := worker("hog", `export default { async queue(batch) {
		if (new TextDecoder().decode(batch.messages[0].body) === "small") return;
		const keep = [];
		for (;;) keep.push(new Array(1 << 16).fill(keep.length + 0.5));
	} };`)
	err := runBatch(t, p, hog, &recSettler{}, "x")
	if !errors.Is(err, ErrSandboxEnded) || !strings.Contains(err.Error(), "memory cap: the kernel killed it at its cgroup's memory limit of 128 MiB") {
		t.Fatalf("err = %v, want the sandbox ended at its cgroup's memory cap", err)
	}
	if l := logText(p, hog); !strings.Contains(l, "memory cap: the kernel killed it at its cgroup's memory limit") {
		t.Fatalf("log %q", l)
	}
	if e := p.Ends(); e[EndMemory] != 1 || len(e) != 1 {
		t.Fatalf("ends %v", e)
	}
	if err := runBatch(t, p, hog, &recSettler{}, "small"); err != nil {
		t.Fatalf("the next invocation: %v", err)
	}
}

// Where the host cannot make cgroups (here: a /proc/self whose mounts name
// no cgroup hierarchy), the pool says so and its sandboxes run without
// one, under the RSS watchdog.
func TestCgroupFallback(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mountinfo"), []byte("22 1 0:21 / /proc rw - proc proc rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("4:memory:/a\n0::/b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, Options{cgroupProc: dir})
	ct, _ := p.Containment()
	if ct.Cgroup != "" || !strings.Contains(strings.Join(ct.Notes, "|"), "cgroup: v2: no unified hierarchy mounted; v1: no memory hierarchy mounted; the memory cap is the RSS watchdog") {
		t.Fatalf("%+v", ct)
	}
	if pr := sandboxOf(t, p, "nocg"); pr.cg != nil {
		t.Fatal("a cgroup without a hierarchy")
	}
}

func TestReadCgroupMounts(t *testing.T) {
	dir := t.TempDir()
	mi := `35 24 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 24 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
37 24 0:32 /sub /sys/fs/cgroup/unified\040dir rw,relatime - cgroup2 cgroup2 rw
`
	os.WriteFile(filepath.Join(dir, "mountinfo"), []byte(mi), 0o644)
	ms, err := readCgroupMounts(filepath.Join(dir, "mountinfo"))
	if err != nil || len(ms) != 3 || !contains(ms[0].controllers, "memory") || !ms[2].v2 || ms[2].dir != "/sys/fs/cgroup/unified dir" || ms[2].root != "/sub" {
		t.Fatalf("%+v %v", ms, err)
	}
	if d, ok := hostDir(ms[2], "/sub/x/y"); !ok || d != "/sys/fs/cgroup/unified dir/x/y" {
		t.Fatalf("%q %v", d, ok)
	}
	if _, ok := hostDir(ms[2], "/other"); ok {
		t.Fatal("a path outside the mount's root")
	}
}

// BenchmarkSandboxStart: a sandbox's whole life, by containment layer:
// starting it, one round trip (the answer to an operation it refuses,
// after its init and containment), stopping it and removing its cgroup.
func BenchmarkSandboxStart(b *testing.B) {
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"none", Options{noSeccomp: true, noCgroup: true, noNetNS: true, noJail: true}},
		{"seccomp", Options{noCgroup: true, noNetNS: true, noJail: true}},
		{"cgroup", Options{noSeccomp: true, noNetNS: true, noJail: true}},
		{"netns", Options{noSeccomp: true, noCgroup: true, noJail: true}},
		{"userns", Options{noSeccomp: true, noCgroup: true, userNS: true, noJail: true}},
		{"jail", Options{noSeccomp: true, noCgroup: true, noNetNS: true}},
		{"all", Options{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(c.o)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			for i := 0; b.Loop(); i++ {
				pr, err := p.get(fmt.Sprint("w:", i), 1)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := pr.c.call(b.Context(), &frame{Op: opSelfTest}); err != nil {
					b.Fatal(err)
				}
				pr.release()
				p.mu.Lock()
				delete(p.procs, pr.key)
				p.mu.Unlock()
				pr.stop() // and its cgroup removed

			}
		})
	}
}

// The local time zone (JavaScript's Date uses it) is read before the
// seccomp filter refuses every open: a host with TZ set gives its
// sandboxes that zone, not UTC.
func TestSandboxTimeZoneUnderSeccomp(t *testing.T) {
	if _, err := os.Stat("/usr/share/zoneinfo/America/New_York"); err != nil {
		t.Skip("no zoneinfo here")
	}
	t.Setenv("TZ", "America/New_York")
	p := newPool(t, Options{})
	if ct, _ := p.Containment(); !ct.Seccomp {
		t.Skipf("no seccomp: %v", ct.Notes)
	}
	v := worker("tz", `export default { fetch() { return new Response(String(new Date(0).getTimezoneOffset())); } };`)
	resp, err := p.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w/x", nil), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "300" {
		t.Fatalf("offset %q, want 300 (New York in January)", b)
	}
}

// liveTCPPort listens on a loopback port that accepts and closes every
// connection (what the self-test's connect would reach without the filter)
// for the rest of the test, and returns its address.
func liveTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}
