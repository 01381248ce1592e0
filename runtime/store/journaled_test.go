package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
	"github.com/takoform/queuehost/runtime/store"
)

var ctx = context.Background()

func accept(q, id string, body []byte) store.AcceptMessage {
	return store.AcceptMessage{Message: store.Message{Queue: q, ID: id, AcceptedAt: 1, VisibleAt: 1, Size: len(body)}, Body: body}
}

func bodyOf(id string, n int) []byte {
	return []byte(strings.Repeat(id+".", n/(len(id)+1)+1)[:n])
}

// snapshot is everything a store returns for the given queues, bodies
// included, for comparing two stores.
type snapshot struct {
	Resources []store.Resource
	Messages  map[string][]store.Message
	Bodies    map[string]string
}

func snap(t *testing.T, s store.Store, queues ...string) snapshot {
	t.Helper()
	sn := snapshot{Messages: map[string][]store.Message{}, Bodies: map[string]string{}}
	var err error
	if sn.Resources, err = s.Resources(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		ms, err := s.Messages(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		sn.Messages[q] = ms
		for _, m := range ms {
			b, err := store.Body(ctx, s, q, m.ID)
			if err != nil {
				t.Fatalf("Body(%s, %s): %v", q, m.ID, err)
			}
			sn.Bodies[q+"/"+m.ID] = string(b)
		}
	}
	return sn
}

func ids(ms []store.Message) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		out[m.ID] = true
	}
	return out
}

func TestSyncFailureAppliesNothing(t *testing.T) {
	ffs := journal.NewFaultFS(nil, 7)
	s := openJournaled(t, ffs, "/d", 1<<20)
	if err := s.Apply(ctx, accept("q", "a", []byte("a"))); err != nil {
		t.Fatal(err)
	}
	ffs.FailSyncs(1)
	err := s.Apply(ctx, accept("q", "b", []byte("b")), store.RemoveMessages{Queue: "q", IDs: []string{"a"}})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, journal.ErrInjected) {
		t.Fatalf("Apply = %v, want ErrUnavailable wrapping the cause", err)
	}
	if ms, _ := s.Messages(ctx, "q"); !reflect.DeepEqual(ids(ms), map[string]bool{"a": true}) {
		t.Fatalf("after failed Apply: %v", ms)
	}
	if err := s.Apply(ctx, accept("q", "c", []byte("c"))); err != nil {
		t.Fatalf("Apply after the fault cleared: %v", err)
	}
	// Power loss: only what was synced survives.
	ffs.Crash(journal.CrashDropUnsynced)
	s2 := openJournaled(t, ffs, "/d", 1<<20)
	defer s2.Close()
	if ms, _ := s2.Messages(ctx, "q"); !reflect.DeepEqual(ids(ms), map[string]bool{"a": true, "c": true}) {
		t.Fatalf("after reopen: %v", ms)
	}
}

func TestShortWrite(t *testing.T) {
	ffs := journal.NewFaultFS(nil, 8)
	s := openJournaled(t, ffs, "/d", 1<<20)
	s.Apply(ctx, accept("q", "a", bodyOf("a", 100)))
	ffs.ShortWrites(1)
	if err := s.Apply(ctx, accept("q", "b", bodyOf("b", 5000))); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Apply with a short write = %v", err)
	}
	if err := s.Apply(ctx, accept("q", "c", bodyOf("c", 100))); err != nil {
		t.Fatal(err)
	}
	ffs.Crash(journal.CrashKeepAll)
	s2, rep, err := store.Open(ctx, "/d", store.Options{FS: ffs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if rep.Truncated {
		t.Fatalf("the short write was not cut off at once: %+v", rep)
	}
	if ms, _ := s2.Messages(ctx, "q"); !reflect.DeepEqual(ids(ms), map[string]bool{"a": true, "c": true}) {
		t.Fatalf("after reopen: %v", ms)
	}
	if b, _ := store.Body(ctx, s2, "q", "c"); string(b) != string(bodyOf("c", 100)) {
		t.Fatal("body of c")
	}
}

func TestDiskFullRecoversByItself(t *testing.T) {
	ffs := journal.NewFaultFS(nil, 9)
	s := openJournaled(t, ffs, "/d", 1<<20)
	defer s.Close()
	var acked []string
	for i := range 10 {
		id := fmt.Sprint("pre", i)
		if err := s.Apply(ctx, accept("q", id, bodyOf(id, 1000))); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, id)
	}
	ffs.SetCapacity(ffs.Used() + 2500)
	failed := 0
	for i := range 10 {
		id := fmt.Sprint("full", i)
		err := s.Apply(ctx, accept("q", id, bodyOf(id, 1000)))
		switch {
		case err == nil:
			acked = append(acked, id)
		case errors.Is(err, store.ErrUnavailable) && strings.Contains(err.Error(), "no space left"):
			failed++
			if _, err := s.Message(ctx, "q", id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("failed Apply of %s is visible", id)
			}
		default:
			t.Fatalf("Apply on a full disk = %v", err)
		}
	}
	if failed < 8 {
		t.Fatalf("only %d Applies failed on a disk with room for two", failed)
	}
	ffs.SetCapacity(-1) // space returns, no reopen
	if err := s.Apply(ctx, accept("q", "later", []byte("x"))); err != nil {
		t.Fatalf("Apply after space returned: %v", err)
	}
	acked = append(acked, "later")
	s.Close()
	s2 := openJournaled(t, ffs, "/d", 1<<20)
	defer s2.Close()
	ms, _ := s2.Messages(ctx, "q")
	if len(ms) != len(acked) {
		t.Fatalf("reopened with %d messages, acknowledged %d", len(ms), len(acked))
	}
	for _, id := range acked {
		if _, err := s2.Message(ctx, "q", id); err != nil {
			t.Fatalf("acknowledged %s lost: %v", id, err)
		}
	}
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	return m
}

func TestTornLastRecordIsCutAndReported(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, nil, dir, 1<<20)
	for i := range 5 {
		s.Apply(ctx, accept("q", fmt.Sprint(i), bodyOf("x", 200)))
	}
	before := s.Stats().Bytes
	s.Close()
	// The manifest and the ack file as a crash during the next group
	// would leave them: their acknowledged mark is before that group.
	manifest, ack := filepath.Join(dir, journal.ManifestName), filepath.Join(dir, journal.AckName)
	mark, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	ackMark, err := os.ReadFile(ack)
	if err != nil {
		t.Fatal(err)
	}
	s = openJournaled(t, nil, dir, 1<<20)
	s.Apply(ctx, accept("q", "torn", bodyOf("torn", 3000)))
	full := s.Stats().Bytes
	s.Close()
	seg := segmentFiles(t, dir)[0]
	// The crash left only part of the last group on disk.
	if err := os.Truncate(seg, before+(full-before)/2); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, mark, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ack, ackMark, 0o600); err != nil {
		t.Fatal(err)
	}
	// No zeros ahead: the size check below is of the data.
	s2, rep, err := store.Open(ctx, dir, store.Options{Logger: quiet, ZeroAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if !rep.Truncated || rep.File != seg || rep.Offset != before || rep.Dropped != (full-before)/2 {
		t.Fatalf("report %+v, want the tail cut at %d of %s, %d bytes", rep, before, seg, (full-before)/2)
	}
	if n, _ := s2.MessageCount(ctx, "q"); n != 5 {
		t.Fatalf("%d messages after cutting the torn record", n)
	}
	if st, _ := os.Stat(seg); st.Size() != before {
		t.Fatalf("segment is %d bytes, want %d", st.Size(), before)
	}
	if err := s2.Apply(ctx, accept("q", "next", []byte("n"))); err != nil {
		t.Fatal(err)
	}
}

func TestBitFlipInTheMiddleRefusesToOpen(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, nil, dir, 1<<20)
	var offs []int64
	for i := range 10 {
		offs = append(offs, s.Stats().Bytes)
		s.Apply(ctx, accept("q", fmt.Sprint(i), bodyOf("x", 100)))
	}
	s.Close()
	seg := segmentFiles(t, dir)[0]
	ffs := journal.NewFaultFS(journal.OSFS{}, 1)
	if err := ffs.FlipBit(seg, offs[3]+40, 2); err != nil {
		t.Fatal(err)
	}
	_, _, err := store.Open(ctx, dir, store.Options{Logger: quiet})
	var ce *journal.CorruptError
	if !errors.As(err, &ce) || ce.File != seg || ce.Offset != offs[3] {
		t.Fatalf("Open = %v, want corruption in %s at %d", err, seg, offs[3])
	}
	if !strings.Contains(err.Error(), seg) || !strings.Contains(err.Error(), fmt.Sprint(offs[3])) {
		t.Fatalf("error %q does not name file and offset", err)
	}
}

// A bit flip in the last record of an acknowledged Apply (a send whose ID
// was returned) is damage below the acknowledged mark, not a torn tail:
// the journal restores the last group from its copy in the ack file and
// says so; a flip in an earlier record refuses Open, naming the file and
// offset, instead of dropping it.
func TestBitFlipInTheLastAcknowledgedRecordIsRestored(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, nil, dir, 1<<20)
	var prev int64
	for i := range 3 {
		prev = s.Stats().Bytes
		s.Apply(ctx, accept("q", fmt.Sprint(i), bodyOf("x", 100)))
	}
	last := s.Stats().Bytes
	if err := s.Apply(ctx, accept("q", "acknowledged", bodyOf("x", 100))); err != nil {
		t.Fatal(err)
	}
	s.Close()
	seg := segmentFiles(t, dir)[0]
	if err := journal.NewFaultFS(journal.OSFS{}, 1).FlipBit(seg, last+60, 5); err != nil {
		t.Fatal(err)
	}
	s2, rep, err := store.Open(ctx, dir, store.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	if !rep.Restored || rep.RestoredFile != seg || rep.RestoredOffset != last || rep.Truncated {
		t.Fatalf("report %+v, want the last group restored at %d", rep, last)
	}
	if b, err := store.Body(ctx, s2, "q", "acknowledged"); err != nil || string(b) != string(bodyOf("x", 100)) {
		t.Fatalf("body of the acknowledged send: %q, %v", b, err)
	}
	s2.Close()
	if err := journal.NewFaultFS(journal.OSFS{}, 1).FlipBit(seg, prev+60, 5); err != nil {
		t.Fatal(err)
	}
	_, _, err = store.Open(ctx, dir, store.Options{Logger: quiet})
	var ce *journal.CorruptError
	if !errors.As(err, &ce) || ce.File != seg || ce.Offset != prev {
		t.Fatalf("Open = %v, want corruption in %s at %d", err, seg, prev)
	}
}

func TestUnknownRecordTypeRefusesToOpen(t *testing.T) {
	mem := journal.NewMemFS(1)
	j, _, err := journal.Open(ctx, "/d", journal.Options{FS: mem, Logger: quiet}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j.Append(ctx, []byte{1, 1, 200}, nil)
	j.Append(ctx, []byte{9, 0}, nil)
	j.Close()
	_, _, err = store.Open(ctx, "/d", store.Options{FS: mem, Logger: quiet})
	if !errors.Is(err, store.ErrBadRecord) || !strings.Contains(err.Error(), "unknown record type 200") || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", journal.SegmentHeaderSize)) {
		t.Fatalf("Open = %v", err)
	}
}

func TestCompactionReclaimsDeadData(t *testing.T) {
	dir := t.TempDir()
	const seg = 64 << 10
	// No zeroing ahead: the test compares the files' sizes with the
	// data's, which zeros ahead of the head would pad.
	opts := store.Options{SegmentSize: seg, Logger: quiet, DisableCompaction: true, ZeroAhead: -1}
	s, _, err := store.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	res := store.Resource{UID: "r1", Space: "s", Name: "n", Spec: []byte(`{}`), Observed: []byte(`{}`), State: store.StateActive}
	s.Apply(ctx, store.PutResource{Resource: res})
	const n = 4000
	for i := 0; i < n; i += 10 {
		var muts []store.Mutation
		for k := i; k < i+10; k++ {
			id := fmt.Sprintf("m%05d", k)
			muts = append(muts, accept("q", id, bodyOf(id, 1024)))
		}
		if err := s.Apply(ctx, muts...); err != nil {
			t.Fatal(err)
		}
		// Every resource put supersedes the previous one.
		res.Generation++
		s.Apply(ctx, store.PutResource{Resource: res})
	}
	s.Apply(ctx, store.DeliverMessages{Queue: "q", Batch: "b1", IDs: []string{"m00001", "m00011"}})
	var acks []string
	for k := range n {
		if k%10 != 1 {
			acks = append(acks, fmt.Sprintf("m%05d", k))
		}
	}
	s.Apply(ctx, store.RemoveMessages{Queue: "q", IDs: acks, Reason: store.RemovedAcknowledged})
	before := s.Stats()
	if before.Segments < 20 || before.LiveBytes > before.Bytes/5 {
		t.Fatalf("setup: %+v", before)
	}
	want := snap(t, s, "q")
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	var disk int64
	for _, f := range segmentFiles(t, dir) {
		st, _ := os.Stat(f)
		disk += st.Size()
	}
	t.Logf("before %+v\nafter %+v\ndisk %d", before, after, disk)
	if disk != after.Bytes || after.Compacted != uint64(before.Segments-1) {
		t.Fatalf("disk %d, stats %+v", disk, after)
	}
	if disk > 2*after.LiveBytes+seg {
		t.Fatalf("after compaction %d bytes on disk for %d live", disk, after.LiveBytes)
	}
	if got := snap(t, s, "q"); !reflect.DeepEqual(got, want) {
		t.Fatal("compaction changed the live state")
	}
	s.Close()
	s2, _, err := store.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := snap(t, s2, "q"); !reflect.DeepEqual(got, want) {
		t.Fatalf("reopened after compaction:\n got %d messages %+v\nwant %d messages %+v", len(got.Messages["q"]), got.Resources, len(want.Messages["q"]), want.Resources)
	}
	if m, _ := s2.Message(ctx, "q", "m00011"); m.Attempts != 1 || m.Lease != "b1" {
		t.Fatalf("delivery state lost in compaction: %+v", m)
	}
}

func TestBackgroundCompactionUnderConcurrentWrites(t *testing.T) {
	dir := t.TempDir()
	const seg = 32 << 10
	opts := store.Options{SegmentSize: seg, Logger: quiet}
	s, _, err := store.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	queues := []string{"q0", "q1", "q2", "q3"}
	for w, q := range queues {
		wg.Go(func() {
			for i := range 600 {
				id := fmt.Sprintf("%d-%d", w, i)
				if err := s.Apply(ctx, accept(q, id, bodyOf(id, 512))); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					s.Apply(ctx, store.DeliverMessages{Queue: q, Batch: "b" + id, IDs: []string{id}})
				}
				if i >= 5 && i%5 != 0 {
					old := fmt.Sprintf("%d-%d", w, i-5)
					s.Apply(ctx, store.RemoveMessages{Queue: q, IDs: []string{old}, Reason: store.RemovedAcknowledged})
				}
			}
		})
	}
	stopReading := make(chan struct{})
	var readers sync.WaitGroup
	// Readers race with segment removal: a body must always be found
	// where the index says, or the message must be gone.
	readers.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopReading:
				return
			default:
			}
			q := queues[i%len(queues)]
			ms, _ := s.Messages(ctx, q)
			for _, m := range ms[:min(len(ms), 20)] {
				b, err := store.Body(ctx, s, q, m.ID)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil || string(b) != string(bodyOf(m.ID, 512)) {
					t.Errorf("Body(%s, %s) during compaction: %q, %v", q, m.ID, b, err)
					return
				}
			}
		}
	})
	wg.Go(func() {
		for range 20 {
			if err := s.Compact(ctx); err != nil {
				t.Error(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	wg.Wait()
	close(stopReading)
	readers.Wait()
	st := s.Stats()
	if st.Compacted == 0 {
		t.Fatalf("nothing compacted: %+v", st)
	}
	want := snap(t, s, queues...)
	s.Close()
	s2, _, err := store.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := snap(t, s2, queues...); !reflect.DeepEqual(got, want) {
		t.Fatal("replay after concurrent compaction differs from the live state")
	}
}

func TestAutomaticCompactionBoundsDisk(t *testing.T) {
	dir := t.TempDir()
	const seg = 32 << 10
	s, _, err := store.Open(ctx, dir, store.Options{SegmentSize: seg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3000 {
		id := fmt.Sprint(i)
		s.Apply(ctx, accept("q", id, bodyOf(id, 700)))
		if i >= 10 {
			s.Apply(ctx, store.RemoveMessages{Queue: "q", IDs: []string{fmt.Sprint(i - 10)}})
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := s.Stats()
		if st.Compacted > 0 && st.Bytes < 8*seg {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background compaction did not bound the journal: %+v", st)
		}
		s.Apply(ctx, store.DropQueue{Queue: "nothing"}) // nudges the compactor
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFillAndMeasureRecovery(t *testing.T) {
	dir := t.TempDir()
	if err := store.FillForBenchmark(ctx, dir, store.Options{Logger: quiet, SegmentSize: 64 << 10}, "q", 1000, 100); err != nil {
		t.Fatal(err)
	}
	rs, err := store.MeasureRecovery(ctx, dir, store.Options{Logger: quiet, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Stats.Messages != 1000 || rs.Report.Frames != 10 || rs.Report.Segments < 2 || rs.Duration <= 0 {
		t.Fatalf("%+v", rs)
	}
}
