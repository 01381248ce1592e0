package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// memCgroup is a memory cgroup made for one test (v2 or v1).
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup makes a memory cgroup limited to limit bytes under the
// test process's own, or skips saying why none can be made here.
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a memory cgroup needs root")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc/self/cgroup: %v", err)
	}
	mounts := map[string]string{}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			f := strings.Fields(line)
			for i, x := range f {
				if x != "-" || i+3 >= len(f) {
					continue
				}
				switch f[i+1] {
				case "cgroup2":
					mounts["v2"] = f[4]
				case "cgroup":
					if strings.Contains(","+f[i+3]+",", ",memory,") {
						mounts["v1"] = f[4]
					}
				}
			}
		}
	}
	name := fmt.Sprintf("takohost-e2e-memory-%d", os.Getpid())
	var why []string
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "" && mounts["v2"] != "":
			parent := filepath.Join(mounts["v2"], parts[2])
			ctrl, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
			if !strings.Contains(" "+string(ctrl)+" ", " memory ") && !strings.Contains(string(ctrl), "memory") {
				why = append(why, "v2: "+parent+" has no memory controller")
				continue
			}
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
				why = append(why, fmt.Sprintf("v2: enabling memory under %s: %v", parent, err))
				continue
			}
			cg := &memCgroup{dir: filepath.Join(parent, name), v2: true}
			if err := cg.make("memory.max", limit); err != nil {
				why = append(why, "v2: "+err.Error())
				continue
			}
			t.Cleanup(cg.remove)
			return cg
		case strings.Contains(","+parts[1]+",", ",memory,") && mounts["v1"] != "":
			cg := &memCgroup{dir: filepath.Join(mounts["v1"], parts[2], name)}
			if err := cg.make("memory.limit_in_bytes", limit); err != nil {
				why = append(why, "v1: "+err.Error())
				continue
			}
			t.Cleanup(cg.remove)
			return cg
		}
	}
	t.Skipf("no memory cgroup can be made here: %s", strings.Join(append(why, "no writable memory hierarchy found"), "; "))
	return nil
}

func (c *memCgroup) make(limitFile string, limit int64) error {
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		os.Remove(c.dir)
		return fmt.Errorf("setting %s: %w", limitFile, err)
	}
	return nil
}

// wrap is the command prefix that starts a process in the group.
func (c *memCgroup) wrap() []string {
	return []string{"sh", "-c", `echo $$ > '` + filepath.Join(c.dir, "cgroup.procs") + `' && exec "$0" "$@"`}
}

// peak is the most memory the group used (0 where the kernel does not say).
func (c *memCgroup) peak() int64 {
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, file))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// ooms is how many processes the kernel killed in the group at its limit.
func (c *memCgroup) ooms() int64 {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, file))
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// remove kills what is left in the group and its children, then removes
// them, deepest first.
func (c *memCgroup) remove() {
	var dirs []string
	filepath.WalkDir(c.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			b, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
			pids := strings.Fields(string(b))
			for _, p := range pids {
				if pid, err := strconv.Atoi(p); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if os.Remove(dirs[i]) == nil || len(pids) == 0 && try > 5 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestMemoryCgroupSurvivesLargeBodies runs the real host in a memory
// cgroup of 1 GiB (#36) and has one editor drive 96 concurrent 8 MiB
// requests at its own worker's fetch route, again and again for 15 s
// (before the body budget each cost the host about 50 MB, and 96 of them
// got the host killed in a 3 GiB cgroup): the host derives its memory
// from the cgroup's limit, answers every request 200 or 503
// memory_budget_in_use, is never killed, and a worker of another
// principal in another space answers every request meanwhile.
func TestMemoryCgroupSurvivesLargeBodies(t *testing.T) {
	const limit = 1 << 30
	cg := newMemCgroup(t, limit)
	e := startEnv(t, hostOpts{principals: true, wrap: cg.wrap()})
	ctx := ctxT(t, 90*time.Second)
	if !contains(e.host.Out.String(), `from="half the memory cgroup's limit`) {
		t.Fatalf("the host did not derive its memory from the cgroup:\n%s", harness.Tail(e.host.Out.String(), 3000))
	}
	deploy := func(c *harness.Client, space, name, code string) string {
		w, err := c.Create(ctx, space, name, harness.FormWorker, map[string]any{"handlers": []string{"fetch"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Create(ctx, space, name+"-v1", harness.FormVersion, map[string]any{
			"worker": harness.Ref(w), "mainModule": "main.js",
			"modules": []any{map[string]any{"name": "main.js", "content": code}},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Put(ctx, space, w, map[string]any{"handlers": []string{"fetch"}, "version": harness.Ref(v)}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	big := deploy(e.client("editor"), spaceA, "big", `export default { async fetch(r) { const n = r.headers.get("x-read") ? (await r.arrayBuffer()).byteLength : 0; return new Response("read " + n); } };`)
	small := deploy(e.client("other"), spaceB, "small", `export default { async fetch(r) { return new Response("ok"); } };`)
	fetch := func(space, uid, tok string, body []byte, read bool) (int, string, string, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", e.host.Base()+"/v2/spaces/"+space+"/resources/"+uid+"/fetch/", rd)
		req.Header.Set("Authorization", "Bearer "+tok)
		if read {
			req.Header.Set("X-Read", "1")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header.Get("Retry-After"), nil
	}
	// Both sandboxes started.
	if st, b, _, err := fetch(spaceB, small, e.tok["other"], nil, false); err != nil || st != 200 {
		t.Fatalf("bystander: %d %s %v", st, b, err)
	}

	stop := make(chan struct{})
	var bystander struct {
		sync.Mutex
		n     int
		errs  []string
		worst time.Duration
	}
	bdone := make(chan struct{})
	go func() {
		defer close(bdone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			start := time.Now()
			st, b, _, err := fetch(spaceB, small, e.tok["other"], nil, false)
			d := time.Since(start)
			bystander.Lock()
			bystander.n++
			bystander.worst = max(bystander.worst, d)
			if err != nil || st != 200 || b != "ok" {
				bystander.errs = append(bystander.errs, fmt.Sprintf("%d %.100s %v", st, b, err))
			}
			bystander.Unlock()
		}
	}()

	payload := bytes.Repeat([]byte("x"), 8<<20)
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	until := time.Now().Add(15 * time.Second)
	for i := range 96 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				st, b, retry, err := fetch(spaceA, big, e.tok["editor"], payload, i%2 == 0)
				var p struct{ Code string }
				_ = json.Unmarshal([]byte(b), &p)
				key := ""
				switch {
				case err != nil:
					key = "error: " + err.Error()
				case st == 200 && strings.HasPrefix(b, "read "):
					key = "200"
				case st == 503 && p.Code == "memory_budget_in_use" && retry != "":
					key = "503 memory_budget_in_use"
				default:
					key = fmt.Sprintf("%d %.200s", st, b)
				}
				mu.Lock()
				codes[key]++
				mu.Unlock()
				if !e.host.Running() {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-bdone

	t.Logf("flood: %v; cgroup peak %d MiB of %d MiB, oom kills %d; bystander %d requests, worst %v",
		codes, cg.peak()>>20, limit>>20, cg.ooms(), bystander.n, bystander.worst)
	if !e.host.Running() {
		t.Fatalf("the host died: %v\n%s", e.host.WaitErr(), harness.Tail(e.host.Out.String(), 3000))
	}
	if len(codes) != 2 || codes["200"] == 0 || codes["503 memory_budget_in_use"] == 0 {
		t.Fatalf("every flood request must be answered 200 or 503 memory_budget_in_use, some of each: %v", codes)
	}
	if len(bystander.errs) > 0 || bystander.n < 20 || bystander.worst > 5*time.Second {
		t.Fatalf("the bystander: %d requests, errors %v, worst %v", bystander.n, bystander.errs, bystander.worst)
	}
	// The host is still whole: another call of the flooding editor works.
	if st, b, _, err := fetch(spaceA, big, e.tok["editor"], []byte("small"), true); err != nil || st != 200 || b != "read 5" {
		t.Fatalf("after the flood: %d %s %v", st, b, err)
	}
	if code, _, err := e.host.Term(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("SIGTERM after the flood: %d %v", code, err)
	}
}
