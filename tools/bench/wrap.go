package main

import (
	"context"
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
	"github.com/takoform/queuehost/runtime/store"
)

// recFS is the real file system, recording the payload length of every
// frame written to a segment, so that the same records can be replayed
// into a bare journal afterwards. It reads the 8-byte headers of what the
// journal writes (each Write is a whole group of frames); it copies
// nothing.
type recFS struct {
	journal.OSFS
	mu   sync.Mutex
	lens []int32
	// With timeSyncs set, every segment Sync's duration is kept.
	timeSyncs atomic.Bool
	syncs     []time.Duration
}

func (fs *recFS) takeSyncs() []time.Duration {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s := fs.syncs
	fs.syncs = nil
	return s
}

func (fs *recFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".wal") {
		return f, err
	}
	return &recFile{File: f, fs: fs}, nil
}

func (fs *recFS) records() []int32 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]int32(nil), fs.lens...)
}

type recFile struct {
	journal.File
	fs *recFS
}

func (f *recFile) Sync() error {
	if !f.fs.timeSyncs.Load() {
		return f.File.Sync()
	}
	t := time.Now()
	err := f.File.Sync()
	d := time.Since(t)
	f.fs.mu.Lock()
	f.fs.syncs = append(f.fs.syncs, d)
	f.fs.mu.Unlock()
	return err
}

func (f *recFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if err == nil {
		f.fs.mu.Lock()
		for off := 0; off+journal.HeaderSize <= len(p); {
			l := int(binary.LittleEndian.Uint32(p[off:]))
			if l == 0 {
				break // zeros written ahead of the data, or a segment header's padding
			}
			f.fs.lens = append(f.fs.lens, int32(l))
			off += journal.HeaderSize + l
		}
		f.fs.mu.Unlock()
	}
	return n, err
}

// replayRecords appends records of the given payload lengths, in order,
// from writers closed-loop goroutines into a fresh journal in dir, and
// returns how long the journal took.
func replayRecords(ctx context.Context, dir string, lens []int32, writers int, counter *atomic.Int64) (time.Duration, journal.Stats, error) {
	jdir, err := os.MkdirTemp(dir, "replay-")
	if err != nil {
		return 0, journal.Stats{}, err
	}
	defer os.RemoveAll(jdir)
	j, _, err := journal.Open(ctx, jdir, journal.Options{Logger: quietLogger, ZeroAhead: journal.DefaultZeroAhead}, nil)
	if err != nil {
		return 0, journal.Stats{}, err
	}
	defer j.Close()
	var maxLen int32
	for _, l := range lens {
		maxLen = max(maxLen, l)
	}
	buf := make([]byte, maxLen)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(lens)) {
					return
				}
				if _, err := j.Append(ctx, buf[:lens[i]], nil); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				counter.Add(1)
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	if e, ok := firstErr.Load().(error); ok {
		return d, j.Stats(), e
	}
	return d, j.Stats(), nil
}

// obsStore wraps the store the engine writes through, to see when
// deliveries and acknowledgements become durable.
type obsStore struct {
	store.Store
	acked     atomic.Int64 // messages removed as acknowledged, durably
	delivered atomic.Int64 // messages recorded as delivered, durably
	onAck     func(ids []string, at time.Time)
	ackHook   atomic.Bool
}

func (s *obsStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	err := s.Store.Apply(ctx, muts...)
	if err != nil {
		return err
	}
	var now time.Time
	for _, m := range muts {
		switch m := m.(type) {
		case store.RemoveMessages:
			if m.Reason == store.RemovedAcknowledged {
				s.acked.Add(int64(len(m.IDs)))
				if s.ackHook.Load() {
					if now.IsZero() {
						now = time.Now()
					}
					s.onAck(m.IDs, now)
				}
			}
		case store.DeliverMessages:
			s.delivered.Add(int64(len(m.IDs)))
		}
	}
	return nil
}
