package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// smallDisk mounts an 8 MiB tmpfs and returns its path, or skips.
func smallDisk(t *testing.T) string {
	if !isRoot() {
		t.Skip("disk full: needs root to mount a small tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	os.MkdirAll(dir, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("disk full: mounting a tmpfs is not allowed here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fill writes dir/filler until the file system is full.
func fill(t *testing.T, dir string) int64 {
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	// Small writes too, down to the last block.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
		n += 512
	}
	return n
}

// TestDiskFull runs the host with its data directory on an 8 MiB tmpfs and
// fills it: sends through a producer Binding reject backend_unavailable,
// Host API creates and updates answer 503 backend_unavailable, a delete
// (which frees space) succeeds on the journal's reserve, GETs still work; once
// the space is free the host serves again by itself; after a restart every
// send that resolved is still there and is delivered.
func TestDiskFull(t *testing.T) {
	mnt := smallDisk(t)
	e := startEnv(t, hostOpts{dataDir: filepath.Join(mnt, "data"), args: []string{"-shutdown-grace", "2s"}})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{NoConsumers: true})
	c := e.admin
	sp := "/v2/spaces/" + topo.Space
	resolved := map[string]string{} // key -> id
	send := func(k string, pad int) (*harness.SendResult, error) {
		b := body(k, "ack")
		if pad > 0 {
			b = mustJSON(map[string]any{"k": k, "do": "ack", "pad": strings.Repeat("p", pad)})
		}
		sr, _, err := harness.Send(ctx, c, topo.Space, topo.Worker, "WORK", []string{b})
		if err == nil && sr.OK {
			resolved[k] = sr.IDs[0]
		}
		return sr, err
	}
	for i := 0; i < 5; i++ {
		if sr, err := send(fmt.Sprintf("before-%d", i), 0); err != nil || !sr.OK {
			t.Fatalf("send before the disk is full: %v %+v", err, sr)
		}
	}
	scratch, err := c.Create(ctx, topo.Space, "scratch", harness.FormQueue, harness.QueueSpec(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := e.host.Pid()

	filled := fill(t, mnt)
	t.Logf("filled the 8 MiB tmpfs with %d bytes", filled)

	// Sends reject backend_unavailable (some still fit in what the
	// journal has already allocated, up to the megabytes it keeps zeroed
	// ahead of its data; 100 sends of 100 KB cannot).
	rejected := 0
	for i := 0; i < 100 && rejected < 3; i++ {
		sr, err := send(fmt.Sprintf("full-%d", i), 100_000)
		if err != nil {
			t.Fatalf("send on a full disk: the fetch route failed: %v", err)
		}
		if !sr.OK {
			if sr.Name != "backend_unavailable" {
				t.Errorf("send on a full disk rejected %q (%s), want backend_unavailable", sr.Name, sr.Message)
			}
			rejected++
		}
	}
	if rejected == 0 {
		t.Fatalf("no send rejected on a full disk")
	}
	// Small sends until three in a row reject: the space the journal
	// keeps zeroed ahead may still have room for small records.
	small := 0
	for i, inRow := 0, 0; i < 5000 && inRow < 3; i++ {
		sr, err := send(fmt.Sprintf("small-%d", i), 0)
		if err != nil {
			t.Fatalf("small send on a full disk: %v", err)
		}
		if sr.OK {
			inRow = 0
			small++
			continue
		}
		if sr.Name != "backend_unavailable" {
			t.Errorf("small send on a full disk rejected %q, want backend_unavailable", sr.Name)
		}
		inRow++
	}
	t.Logf("%d small sends still fitted after the disk was full", small)
	// Creates and updates answer 503 backend_unavailable problems.
	muts := []struct {
		name, method, path string
		body               any
	}{
		{"create", "POST", sp + "/resources", map[string]any{"name": "during-full", "formUrl": harness.FormQueue, "spec": harness.QueueSpec(0)}},
		{"update", "PUT", sp + "/resources/" + topo.DLQ, map[string]any{"spec": harness.QueueSpec(3)}},
	}
	for _, m := range muts {
		r, err := c.Do(ctx, m.method, m.path, m.body, nil)
		if err != nil {
			t.Errorf("%s on a full disk: %v", m.name, err)
			continue
		}
		if r.Status != 503 {
			t.Errorf("%s on a full disk: want 503 backend_unavailable, got %s", m.name, r)
			if r.Status == 202 {
				var op harness.Operation
				r.JSON(&op)
				fin, _ := c.WaitOp(ctx, topo.Space, op.ID, 10*time.Second)
				t.Logf("  its Operation: %+v", fin)
			}
			continue
		}
		checkProblem(t, r, "backend_unavailable")
	}
	// A delete frees space, so it uses the journal's reserve and succeeds
	// on the full disk.
	if r, err := c.Do(ctx, "DELETE", sp+"/resources/"+scratch, nil, nil); err != nil || r.Status != 202 {
		t.Errorf("delete on a full disk: want 202, got %v %s", err, r)
	} else {
		var op harness.Operation
		r.JSON(&op)
		if fin, err := c.WaitOp(ctx, topo.Space, op.ID, 10*time.Second); err != nil || fin.State != "succeeded" {
			t.Errorf("delete on a full disk: its Operation %+v, %v", fin, err)
		}
	}
	// GETs still work.
	if _, err := c.List(ctx, topo.Space); err != nil {
		t.Errorf("list on a full disk: %v", err)
	}
	if _, _, err := c.Get(ctx, topo.Space, topo.Queue); err != nil {
		t.Errorf("get on a full disk: %v", err)
	}
	if r, err := c.Do(ctx, "GET", sp+"/resources/"+topo.Worker+"/logs", nil, nil); err != nil || r.Status != 200 {
		t.Errorf("logs on a full disk: %v %s", err, r)
	}

	// Free the space: the host resumes by itself.
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	if err := harness.Poll(30*time.Second, func() error {
		sr, err := send(fmt.Sprintf("after-%d", time.Now().UnixNano()), 0)
		if err != nil {
			return err
		}
		if !sr.OK {
			return fmt.Errorf("send after freeing the disk rejected %s (%s)", sr.Name, sr.Message)
		}
		return nil
	}); err != nil {
		t.Errorf("no recovery without restart: %v", err)
	}
	if err := harness.Poll(30*time.Second, func() error {
		r, err := c.Do(ctx, "POST", sp+"/resources", map[string]any{"name": "after-full", "formUrl": harness.FormQueue, "spec": harness.QueueSpec(0)}, nil)
		if err != nil {
			return err
		}
		if r.Status != 202 {
			return fmt.Errorf("create after freeing the disk: %s", r)
		}
		return nil
	}); err != nil {
		t.Errorf("no recovery of the Host API without restart: %v", err)
	}
	if e.host.Pid() != pid {
		t.Errorf("the host restarted (pid %d -> %d)", pid, e.host.Pid())
	}
	t.Logf("resumed %s after the space was freed", time.Since(freed).Round(time.Millisecond))

	// Restart: nothing is corrupted and every resolved send is there.
	if code, _, err := e.host.Term(20 * time.Second); err != nil || code != 0 {
		t.Errorf("SIGTERM after the disk was full: exit %d %v", code, err)
	}
	e.start()
	list, err := c.List(ctx, topo.Space)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.Name == "during-full" {
			t.Errorf("a create refused on the full disk exists after restart: %+v", r)
		}
	}
	if _, err := c.Create(ctx, topo.Space, "work-consumer", harness.FormConsumer, map[string]any{
		"queue": harness.Ref(topo.Queue), "worker": harness.Ref(topo.Worker),
		"maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 2, "maxRetries": 2, "retryDelaySeconds": 0,
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := harness.Poll(30*time.Second, func() error {
		for k, id := range resolved {
			ds := e.rec.Deliveries(k)
			if len(ds) == 0 {
				return fmt.Errorf("resolved send %s (%s) not delivered after restart", k, id)
			}
			if ds[0].Msg.ID != id {
				return fmt.Errorf("%s delivered as %s, sent as %s", k, ds[0].Msg.ID, id)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	t.Logf("%d resolved sends, %d rejected on the full disk; all delivered after restart", len(resolved), rejected)
}
