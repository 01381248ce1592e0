package sandbox

import (
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// jailOf: a host running as root must get the jail unless the kernel
// refuses its namespaces (then the test skips, saying why).
func jailOf(t *testing.T, p *Pool) Containment {
	t.Helper()
	ct, _ := p.Containment()
	if !ct.Jail {
		for _, n := range ct.Notes {
			if strings.Contains(n, "the kernel refused") {
				t.Skipf("no jail here: %s", n)
			}
		}
		t.Fatalf("no jail: %v", ct.Notes)
	}
	return ct
}

// A host's secrets, as a sandbox could look for them: an admin token file
// and a journal directory readable by anyone (so that only the jail keeps
// the sandbox from them), and a variable in the host's environment.
func hostSecrets(t *testing.T) (token, journal string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "takohost-jail-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{dir, filepath.Join(dir, "journal")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
	}
	token = filepath.Join(dir, "admin.token")
	journal = filepath.Join(dir, "journal")
	if err := os.WriteFile(token, []byte("tk_secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(journal, "00000001.seg"), []byte("frames"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TAKOHOST_TEST_HOST_SECRET", "s3cret")
	return token, journal
}

// From inside a real sandbox (its own Go code, as if worker code had
// escaped goja), with every layer and with the jail alone (no seccomp, no
// cgroup, no network namespace: what the jail does by itself): reading
// /proc/1/environ or the host's, the admin token file and the journal
// (opened and stat'ed), listing processes, signalling the host or every
// process, and finding a variable of the host's environment all fail;
// the sandbox is uid and gid 65534 with no supplementary group, no
// capability in any set (bounding and ambient included), and an
// environment of only what the host passes. From the host's side: its
// /proc/<pid>/status says the same, no_new_privs is set, and its mount,
// PID, IPC and UTS namespaces are not the host's.
func TestJail(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail's uid change needs a host running as root")
	}
	token, journal := hostSecrets(t)
	addr := liveTCPPort(t)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"contained", Options{selfTest: true}},
		{"jail-only", Options{selfTest: true, noSeccomp: true, noCgroup: true, noNetNS: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t, c.o)
			ct := jailOf(t, p)
			if ct.UID != DefaultSandboxID || ct.GID != DefaultSandboxID {
				t.Fatalf("Containment %+v, want uid and gid %d", ct, DefaultSandboxID)
			}
			pr := sandboxOf(t, p, c.name)
			pid := pr.cmd.Process.Pid
			got := selfTestOf(t, pr, addr, "read="+token, "read="+journal, "env=TAKOHOST_TEST_HOST_SECRET")
			t.Logf("%v", got)
			for _, what := range []string{
				"read /proc/1/environ", "read the host's environ",
				"read " + token, "stat " + token, "read " + journal, "stat " + journal,
				"list processes", "signal the host", "signal every process", "env TAKOHOST_TEST_HOST_SECRET",
			} {
				if r, ok := got[what]; !ok || r == "allowed" {
					t.Errorf("%s: %q, want it refused", what, r)
				}
			}
			want := map[string]string{
				"uid": "65534", "gid": "65534", "groups": "[]",
				"capabilities": "effective 0 permitted 0 inheritable 0",
				"bounding set": "0", "ambient": "0",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q", k, got[k], v)
				}
			}
			allowed := map[string]bool{EnvVar: true, "GOTRACEBACK": true, "GOMAXPROCS": true, "GOGC": true,
				envSeccomp: true, envSelfTest: true, envTZ: true, envJailed: true}
			for _, k := range strings.Split(got["environment"], ",") {
				if !allowed[k] {
					t.Errorf("the sandbox's environment has %s: %s", k, got["environment"])
				}
			}
			if !strings.Contains(got["environment"], envJailed) {
				t.Errorf("environment %s: the jail's second stage did not run", got["environment"])
			}
			// The sandbox still serves.
			sandboxOf(t, p, c.name)

			for field, v := range map[string]string{
				"Uid": "65534\t65534\t65534\t65534", "Gid": "65534\t65534\t65534\t65534", "Groups": "",
				"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
				"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
			} {
				if got := statusField(t, pid, field); got != v {
					t.Errorf("/proc/%d/status %s: %q, want %q", pid, field, got, v)
				}
			}
			for _, ns := range []string{"mnt", "pid", "ipc", "uts"} {
				mine, _ := os.Readlink("/proc/self/ns/" + ns)
				its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
				if err != nil || its == mine {
					t.Errorf("%s namespace: the sandbox's %q (%v), the host's %q", ns, its, err, mine)
				}
			}
			if nspid := statusField(t, pid, "NSpid"); !strings.HasSuffix(nspid, "\t1") {
				t.Errorf("NSpid %q: want pid 1 in its own namespace", nspid)
			}
		})
	}
}

// Where the sandbox's uid cannot execute the host's program, the pool
// says so and its sandboxes keep uid 0, still with no capabilities.
func TestJailKeepsUIDWhenItCannotExec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs a host running as root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	private := filepath.Join(dir, "host")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(private, b, 0o700); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, Options{selfTest: true, Executable: private})
	ct := jailOf(t, p)
	if ct.UID != 0 || !strings.Contains(strings.Join(ct.Notes, "|"), "is not executable by uid 65534") {
		t.Fatalf("%+v", ct)
	}
	pr := sandboxOf(t, p, "keep")
	got := selfTestOf(t, pr, liveTCPPort(t))
	if got["uid"] != "0" || got["capabilities"] != "effective 0 permitted 0 inheritable 0" || got["bounding set"] != "0" {
		t.Fatalf("%v", got)
	}
	if got := statusField(t, pr.cmd.Process.Pid, "CapEff"); got != "0000000000000000" {
		t.Fatalf("CapEff %s", got)
	}
}

// A descriptor the host's process inherited without close-on-exec (a
// supervisor's log, a file a wrapper script opened: "takohost 9<token")
// is not the sandbox's: from inside a real sandbox, with every layer and
// with none, reading it fails (os/exec passes every descriptor that is
// not close-on-exec on to the child, beside its ExtraFiles).
func TestSandboxHoldsNoInheritedDescriptor(t *testing.T) {
	token, _ := hostSecrets(t)
	f, err := os.Open(token)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const leaked = 300 // above every descriptor os/exec places in the child
	if err := unix.Dup3(int(f.Fd()), leaked, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leaked)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"contained", Options{selfTest: true}},
		{"none", Options{selfTest: true, noSeccomp: true, noCgroup: true, noNetNS: true, noJail: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t, c.o)
			pr := sandboxOf(t, p, c.name)
			got := selfTestOf(t, pr, liveTCPPort(t), "fd="+strconv.Itoa(leaked))
			if r, ok := got["read fd 300"]; !ok || r == "allowed" {
				t.Fatalf("read fd %d (the host's admin token file): %q, want it refused", leaked, r)
			}
			// The sandbox still serves.
			sandboxOf(t, p, c.name)
		})
	}
}

// Inside the jail (no /dev, no /proc, no file at all) with every layer,
// the Go runtime still has randomness (getrandom, not /dev/urandom):
// crypto.getRandomValues and crypto.randomUUID answer, and differ call to
// call.
func TestJailedSandboxHasRandomness(t *testing.T) {
	p := newPool(t, Options{})
	if ct, _ := p.Containment(); !ct.Jail {
		t.Skipf("no jail here: %v", ct.Notes)
	}
	v := worker("rand", `export default { fetch() {
		const a = crypto.getRandomValues(new Uint8Array(16));
		return new Response(Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("") + " " + crypto.randomUUID());
	} };`)
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		resp, err := p.Fetch(t.Context(), v, httptest.NewRequest("GET", "http://w/x", nil), "x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		hex, uuid, _ := strings.Cut(string(b), " ")
		if resp.StatusCode != 200 || len(hex) != 32 || hex == strings.Repeat("0", 32) || len(uuid) != 36 || seen[hex] || seen[uuid] {
			t.Fatalf("%d %q (seen %v)", resp.StatusCode, b, seen)
		}
		seen[hex], seen[uuid] = true, true
	}
}

// A host started with a restrictive umask (systemd's UMask=0077, a
// hardened shell) still gets the jail: the directories the first stage
// makes in the new root for the loader's files must be searchable by the
// sandbox's uid whatever the host's umask.
func TestJailUnderRestrictiveUmask(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail's uid change needs a host running as root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if files, err := loaderFiles(exe); err != nil || len(files) == 0 {
		t.Skipf("a static program needs no loader files in the jail (%v)", err)
	}
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	p := newPool(t, Options{selfTest: true})
	ct := jailOf(t, p)
	if ct.UID != DefaultSandboxID {
		t.Fatalf("Containment %+v, want uid %d", ct, DefaultSandboxID)
	}
	got := selfTestOf(t, sandboxOf(t, p, "umask"), liveTCPPort(t))
	if got["uid"] != "65534" {
		t.Fatalf("%v", got)
	}
}

// A jailed sandbox runs as uid 65534, which other processes of the
// machine may run as too (nobody's daemons; every sandbox of every host
// here): none of them may inspect it (its memory holds the messages and
// request bodies of the worker it serves). From a process of uid 65534 in
// the host's PID namespace, reading the sandbox's /proc/<pid>/environ
// (what ptrace's read check guards, as it guards /proc/<pid>/mem) fails:
// the sandbox is not dumpable.
func TestJailedSandboxNotInspectableBySameUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail's uid change needs a host running as root")
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat here")
	}
	p := newPool(t, Options{})
	ct := jailOf(t, p)
	pr := sandboxOf(t, p, "inspect")
	cmd := exec.Command(cat, fmt.Sprintf("/proc/%d/environ", pr.cmd.Process.Pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(ct.UID), Gid: uint32(ct.GID)}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("uid %d read the sandbox's environ: %q", ct.UID, out)
	}
	if !strings.Contains(string(out), "ermission denied") {
		t.Fatalf("%v: %s", err, out)
	}
}
