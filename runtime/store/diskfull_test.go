package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
)

// TestFullDiskIsReclaimed is the case: a backlog fills the disk;
// new sends are refused cleanly (ErrNoSpace) while settlements still
// succeed; once the queue has drained, the space comes back — also for a
// host that restarts on the full disk — because a mostly dead head segment
// is sealed and compacted.
func TestFullDiskIsReclaimed(t *testing.T) {
	// Segments smaller than the disk, and one larger: then the whole
	// backlog is in the head segment, which compaction never touches
	// until it is sealed.
	for _, seg := range []int64{256 << 10, 4 << 20} {
		t.Run(fmt.Sprint(seg), func(t *testing.T) { fullDiskIsReclaimed(t, seg) })
	}
}

func fullDiskIsReclaimed(t *testing.T, seg int64) {
	ctx := context.Background()
	ffs := journal.NewFaultFS(nil, 1)
	opts := Options{FS: ffs, SegmentSize: seg, DiskReserve: 128 << 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DisableCompaction: true, CompactMinGarbage: 64 << 20}
	s, _, err := Open(ctx, "/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	res := Resource{UID: "r", Space: "s", Name: "n", Spec: []byte(`{}`), Observed: []byte(`{}`), State: StateActive}
	if err := s.Apply(ctx, PutResource{res}); err != nil {
		t.Fatal(err)
	}
	ffs.SetCapacity(ffs.Used() + 2<<20)
	body := make([]byte, 120<<10)
	send := func(id string) error {
		return s.Apply(ctx, AcceptMessage{Message: Message{Queue: "q", ID: id, AcceptedAt: 1, VisibleAt: 1, Size: len(body)}, Body: body})
	}
	var ids []string
	for i := range 100 {
		id := fmt.Sprintf("m%03d", i)
		if err = send(id); err != nil {
			break
		}
		ids = append(ids, id)
	}
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrUnavailable) || len(ids) < 8 {
		t.Fatalf("after %d sends: %v, want ErrNoSpace", len(ids), err)
	}
	if err := s.Apply(ctx, PutResource{Resource{UID: "new", Space: "s", Name: "other", Spec: []byte(`"` + string(make([]byte, 120<<10)) + `"`)}}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("creating a resource on a full disk: %v", err)
	}
	// Settlements and deletes use the reserve.
	if err := s.Apply(ctx, DeliverMessages{Queue: "q", Batch: "b", IDs: ids}); err != nil {
		t.Fatalf("delivery on a full disk: %v", err)
	}
	if err := s.Apply(ctx, RemoveMessages{Queue: "q", IDs: ids, Reason: RemovedAcknowledged}); err != nil {
		t.Fatalf("acknowledgement on a full disk: %v", err)
	}
	res.State = StateDeleting
	if err := s.Apply(ctx, PutResource{res}); err != nil {
		t.Fatalf("starting a delete on a full disk: %v", err)
	}
	if err := s.Apply(ctx, DeleteResource{res.UID}); err != nil {
		t.Fatalf("delete on a full disk: %v", err)
	}
	// The queue is empty: a restart must not find the disk still full.
	s.Close()
	opts.DisableCompaction = false
	s, _, err = Open(ctx, "/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := send("after")
		if err != nil && !errors.Is(err, ErrNoSpace) {
			t.Fatal(err)
		}
		if st := s.Stats(); err == nil && st.SealedBytes > st.SealedLiveBytes {
			err = fmt.Errorf("compaction still running")
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("send after the queue drained and the host restarted: %v (stats %+v, free %d)", err, s.Stats(), ffs.Used())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 8 {
		if err := send(fmt.Sprintf("again%d", i)); err != nil {
			t.Fatalf("send %d after reclaiming: %v (stats %+v, used %d)", i, err, s.Stats(), ffs.Used())
		}
	}
}

// smallFS mounts a tmpfs of size bytes and returns its path, or skips.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("small disk: needs root to mount a tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("small disk: mounting a tmpfs is not allowed here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// TestSmallDiskFilledByTheHostRecovers is the hostile suite's case: on a
// small real file system, with the defaults the host runs with (zeroing
// ahead, the reserve an eighth of the disk), sends fill the disk, the
// queue drains, and sends must work again — without a restart and after
// one. The reserve has to cover every write that gets the space back:
// zeros ahead of a new head segment, the manifest, compaction's rewrites.
func TestSmallDiskFilledByTheHostRecovers(t *testing.T) {
	for _, size := range []string{"12m", "20m", "64m"} {
		t.Run(size, func(t *testing.T) { smallDiskRecovers(t, smallFS(t, size)) })
	}
	// Too small to keep the least reserve: refused with the reason.
	t.Run("2m", func(t *testing.T) {
		dir := filepath.Join(smallFS(t, "2m"), "data")
		_, _, err := Open(context.Background(), dir, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if !errors.Is(err, journal.ErrDiskTooSmall) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open on a 2 MiB file system = %v, want ErrDiskTooSmall naming %s", err, dir)
		}
	})
}

func smallDiskRecovers(t *testing.T, mnt string) {
	ctx := context.Background()
	dir := filepath.Join(mnt, "data")
	opts := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s, _, err := Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	body := make([]byte, 60<<10)
	n := 0
	send := func() error {
		n++
		return s.Apply(ctx, AcceptMessage{Message: Message{Queue: "q", ID: fmt.Sprintf("m%06d", n), AcceptedAt: 1, VisibleAt: 1, Size: len(body)}, Body: body})
	}
	// Fill: the host itself takes the disk to its reserve.
	var ids []string
	for {
		err := send()
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("filling, send %d: %v, want ErrNoSpace", n, err)
			}
			break
		}
		ids = append(ids, fmt.Sprintf("m%06d", n))
	}
	t.Logf("%d sends filled the disk", len(ids))
	// Drain all of it.
	for len(ids) > 0 {
		batch := ids[:min(100, len(ids))]
		ids = ids[len(batch):]
		if err := s.Apply(ctx, DeliverMessages{Queue: "q", Batch: "b", IDs: batch}); err != nil {
			t.Fatalf("delivery on a full disk: %v", err)
		}
		if err := s.Apply(ctx, RemoveMessages{Queue: "q", IDs: batch, Reason: RemovedAcknowledged}); err != nil {
			t.Fatalf("acknowledgement on a full disk: %v", err)
		}
	}
	// Sends work again: 40 of them (2.4 MB) within the deadline, each
	// retried while compaction is handing the drained space back.
	sendsAgain := func(when string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; i < 40; {
			err := send()
			if err == nil {
				i++
				continue
			}
			if !errors.Is(err, ErrNoSpace) || time.Now().After(deadline) {
				free, _ := s.j.FreeSpace()
				t.Fatalf("send %d %s: %v (stats %+v, free %d, reserve %d)", i, when, err, s.Stats(), free, s.j.Reserve())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	sendsAgain("after the queue drained, without a restart")
	// Fill and drain again, then restart on the drained disk.
	ids = nil
	for {
		if err := send(); err != nil {
			break
		}
		ids = append(ids, fmt.Sprintf("m%06d", n))
	}
	for len(ids) > 0 {
		batch := ids[:min(100, len(ids))]
		ids = ids[len(batch):]
		s.Apply(ctx, DeliverMessages{Queue: "q", Batch: "b", IDs: batch})
		if err := s.Apply(ctx, RemoveMessages{Queue: "q", IDs: batch, Reason: RemovedAcknowledged}); err != nil {
			t.Fatalf("acknowledgement on a full disk: %v", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _, err = Open(ctx, dir, opts)
	if err != nil {
		t.Fatalf("restart on the drained disk: %v", err)
	}
	sendsAgain("after a restart on the drained disk")
}
