package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestSandboxCrashChargesOnlyItsCause: one poison message whose handler
// exhausts its sandbox's memory, delivered while four innocent batches of
// the same worker are running in the same sandbox (the recorder's gate
// holds each innocent until the sandbox ends, and lets the poison start
// allocating only once all four are held). With maxRetries 1 and a
// dead-letter queue: every innocent message is delivered with attempts 1
// only and acknowledged (the batches the end interrupted ran again alone,
// in the same attempt); the poison is charged, delivered twice and
// dead-lettered.
func TestSandboxCrashChargesOnlyItsCause(t *testing.T) {
	const innocents = 4
	e := startEnv(t, hostOpts{})
	var mu sync.Mutex
	held := 0
	ended := make(chan struct{})
	var once sync.Once
	e.rec.SetGate(func(r *http.Request) {
		switch path.Base(r.URL.Path) {
		case "innocent":
			select {
			case <-ended:
				return
			default:
			}
			mu.Lock()
			held++
			mu.Unlock()
			select {
			case <-r.Context().Done(): // the sandbox that asked ended
				once.Do(func() { close(ended) })
			case <-ended:
			case <-time.After(60 * time.Second):
			}
		case "hog":
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := held
				mu.Unlock()
				if n >= innocents {
					return
				}
			}
		}
	})
	topo := e.topology(harness.TopologyOptions{MaxRetries: 1, MaxBatchSize: 1, Concurrency: innocents + 1})
	ctx := ctxT(t, 180*time.Second)
	var bodies []string
	for i := range innocents {
		bodies = append(bodies, body(fmt.Sprintf("innocent-%d", i), "gate:innocent"))
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("poison", "hog")}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}

	acked := func(id string) bool {
		for _, ev := range e.rec.Events() {
			for _, a := range ev.Acked {
				if a == id {
					return true
				}
			}
		}
		return false
	}
	err := harness.Poll(120*time.Second, func() error {
		for i := range innocents {
			k := fmt.Sprintf("innocent-%d", i)
			d := e.rec.Deliveries(k)
			if len(d) == 0 || !acked(d[0].Msg.ID) {
				return fmt.Errorf("%s not acknowledged yet (deliveries %+v)", k, d)
			}
		}
		for _, d := range e.rec.Deliveries("poison") {
			if d.Queue == topo.DLQName {
				return nil
			}
		}
		return fmt.Errorf("the poison message is not dead-lettered yet (deliveries %+v)", e.rec.Deliveries("poison"))
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("the innocent batches were not running when the sandbox ended")
	}
	for i := range innocents {
		k := fmt.Sprintf("innocent-%d", i)
		for _, d := range e.rec.Deliveries(k) {
			if d.Queue != topo.QueueName || d.Msg.Attempts != 1 {
				t.Errorf("%s delivered on %s with attempts %d; want only attempts 1 on %s", k, d.Queue, d.Msg.Attempts, topo.QueueName)
			}
		}
	}
	var poison []int
	for _, d := range e.rec.Deliveries("poison") {
		if d.Queue == topo.QueueName {
			poison = append(poison, d.Msg.Attempts)
		}
	}
	if len(poison) == 0 || poison[len(poison)-1] != 2 {
		t.Errorf("poison deliveries on %s with attempts %v; want the last at 2 (1 + maxRetries)", topo.QueueName, poison)
	}
	if !e.host.Running() {
		t.Fatal("the host process ended")
	}
}

// TestSandboxJailOnTheRealBinary: the real host, as root, with a secret in
// its environment: once its worker's sandbox runs, that process (a child
// of the host) is uid and gid 65534 with no capability in any set and
// no_new_privs, in mount, PID, IPC and UTS namespaces that are not the
// host's, and its environment holds nothing of the host's (the secret
// least of all). TestJail (runtime/sandbox) tries the same from inside.
func TestSandboxJailOnTheRealBinary(t *testing.T) {
	if !isRoot() {
		t.Skip("the jail's uid change needs a host running as root")
	}
	t.Setenv("TAKOHOST_E2E_HOST_SECRET", "s3cret-e2e")
	e := startEnv(t, hostOpts{})
	topo := e.topology(harness.TopologyOptions{})
	ctx := ctxT(t, 60*time.Second)
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("jailed", "ack")}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(30*time.Second, func() error {
		if len(e.rec.Deliveries("jailed")) == 0 {
			return fmt.Errorf("not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if out := e.host.Out.String(); strings.Contains(out, "jail: the kernel refused") {
		t.Skipf("the kernel refuses the jail's namespaces here: %s", harness.Tail(out, 2000))
	}
	host := e.host.Pid()
	field := func(status, name string) string {
		for _, line := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	seen := 0
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/status")
		if err != nil || field(string(b), "PPid") != strconv.Itoa(host) {
			continue
		}
		seen++
		st := string(b)
		for name, want := range map[string]string{
			"Uid": "65534\t65534\t65534\t65534", "Gid": "65534\t65534\t65534\t65534", "Groups": "",
			"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
			"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
		} {
			if got := field(st, name); got != want {
				t.Errorf("sandbox %s %s: %q, want %q", d, name, got, want)
			}
		}
		for _, ns := range []string{"mnt", "pid", "ipc", "uts", "net"} {
			mine, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", host, ns))
			its, _ := os.Readlink(d + "/ns/" + ns)
			if its == "" || its == mine {
				t.Errorf("sandbox %s: %s namespace %q, the host's %q", d, ns, its, mine)
			}
		}
		env, err := os.ReadFile(d + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range strings.Split(strings.TrimRight(string(env), "\x00"), "\x00") {
			k, _, _ := strings.Cut(kv, "=")
			if !strings.HasPrefix(k, "TAKOHOST_SANDBOX") && k != "GOTRACEBACK" && k != "GOMAXPROCS" && k != "GOGC" {
				t.Errorf("sandbox %s has %s from the host's environment", d, k)
			}
		}
		if strings.Contains(string(env), "s3cret-e2e") {
			t.Errorf("the host's secret is in sandbox %s's environment", d)
		}
	}
	if seen == 0 {
		t.Fatalf("no sandbox process under the host (pid %d)", host)
	}
}
