package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
