package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// journalPoint is one closed-loop run of concurrent appenders.
type journalPoint struct {
	Writers     int
	RecordBytes int
	Appends     uint64
	Groups      uint64
	Wall, CPU   time.Duration
}

func (p journalPoint) perSec() float64 { return float64(p.Appends) / p.Wall.Seconds() }

// runJournalPoint appends records of size bytes from writers goroutines,
// each waiting for its append to be durable before the next, for d.
func runJournalPoint(ctx context.Context, dir string, writers, size int, d time.Duration, counter *atomic.Int64) (journalPoint, error) {
	pt := journalPoint{Writers: writers, RecordBytes: size}
	jdir, err := os.MkdirTemp(dir, "journal-")
	if err != nil {
		return pt, err
	}
	defer os.RemoveAll(jdir)
	j, _, err := journal.Open(ctx, jdir, journal.Options{Logger: quietLogger, ZeroAhead: journal.DefaultZeroAhead}, nil)
	if err != nil {
		return pt, err
	}
	defer j.Close()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	s0 := j.Stats()
	sp := startSpan()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := j.Append(ctx, payload, nil); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				counter.Add(1)
			}
		}()
	}
	wg.Wait()
	pt.Wall, pt.CPU = sp.end()
	s1 := j.Stats()
	pt.Appends, pt.Groups = s1.Appends-s0.Appends, s1.Groups-s0.Groups
	if e, ok := firstErr.Load().(error); ok {
		return pt, e
	}
	return pt, nil
}

func (b *bench) journalLayer(ctx context.Context) {
	s := b.rep.section("Journal appends (runtime/journal)",
		fmt.Sprintf("Closed loop: each writer appends one record and waits until it is durable, then the next, for %s per point. "+
			"Ratio to fsync: durable appends per second ÷ raw fdatasync calls per second (above 1× means group commit shares syncs). "+
			"Records per fsync is the journal's own count (appends ÷ group commits). CPU is this process's getrusage time per million appends.", b.pointDur),
		"writers", "record", "appends/s", "raw fsync/s", "ratio to fsync", "records per fsync", "group commits/s ÷ fsync/s", "MB/s ÷ synced MB/s", "CPU s per 1M appends")
	for _, size := range []int{128, 4096} {
		for _, w := range []int{1, 16, 256} {
			c := b.prog.phase(fmt.Sprintf("journal %d writers %s", w, bytesize(size)), "appends")
			pt, err := runJournalPoint(ctx, b.dir, w, size, b.pointDur, c)
			b.prog.end()
			if err != nil {
				s.note("%d writers, %s: error: %v", w, bytesize(size), err)
				continue
			}
			rate := pt.perSec()
			perGroup := float64(pt.Appends) / float64(max(pt.Groups, 1))
			groupsPerSec := float64(pt.Groups) / pt.Wall.Seconds()
			mbps := rate * float64(size+journal.HeaderSize) / (1 << 20)
			s.row(fmt.Sprint(w), bytesize(size), num(rate), num(b.rep.Limits.FsyncPerSec), ratio(rate, b.rep.Limits.FsyncPerSec),
				num(perGroup), pct(groupsPerSec/b.rep.Limits.FsyncPerSec), pct(mbps/b.rep.Limits.SyncWriteMBps),
				num(pt.CPU.Seconds()/float64(max(pt.Appends, 1))*1e6))
			b.results[fmt.Sprintf("journal/%d/%d", w, size)] = rate
		}
	}
}

// journalRecovery writes a journal of about total bytes in 1 KiB records,
// closes it, reads the same files raw (the limit: the same bytes, the same
// page cache), then times journal.Open replaying every frame.
func (b *bench) journalRecovery(ctx context.Context, total int64) {
	s := b.rep.section("Journal recovery",
		fmt.Sprintf("A journal of %s in 1 KiB records (the size actually used this run), closed, then reopened: Open replays and checksums every frame. "+
			"Limit: a plain sequential read of the same segment files in the same run, right before (both are served from the page cache the write left behind; "+
			"the caches were not dropped, since the machine is shared).", mib(float64(total))),
		"journal bytes", "frames", "segments", "raw read of the files", "Open (replay)", "replay MB/s", "ratio to raw read")
	jdir, err := os.MkdirTemp(b.dir, "recovery-")
	if err != nil {
		s.NotMeasured = err.Error()
		return
	}
	defer os.RemoveAll(jdir)
	j, _, err := journal.Open(ctx, jdir, journal.Options{Logger: quietLogger}, nil)
	if err != nil {
		s.NotMeasured = err.Error()
		return
	}
	const rec = 1024
	n := total / (rec + journal.HeaderSize)
	c := b.prog.phase("recovery: write journal", "records")
	payload := make([]byte, rec)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var werr atomic.Value
	for w := 0; w < 512; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				if _, err := j.Append(ctx, payload, nil); err != nil {
					werr.CompareAndSwap(nil, err)
					return
				}
				c.Add(1)
			}
		}()
	}
	wg.Wait()
	b.prog.end()
	if err := j.Close(); err != nil {
		s.NotMeasured = err.Error()
		return
	}
	if e, ok := werr.Load().(error); ok {
		s.NotMeasured = "writing the journal: " + e.Error()
		return
	}

	b.prog.phase("recovery: raw read", "")
	raw, rawBytes := rawRead(jdir)
	b.prog.end()

	c = b.prog.phase("recovery: journal.Open", "frames")
	var frames int64
	t0 := time.Now()
	j2, rep, err := journal.Open(ctx, jdir, journal.Options{Logger: quietLogger}, func(_ journal.Pos, p []byte) error {
		frames++
		if frames%4096 == 0 {
			c.Store(frames)
		}
		return nil
	})
	open := time.Since(t0)
	b.prog.end()
	if err != nil {
		s.NotMeasured = "reopening: " + err.Error()
		return
	}
	j2.Close()
	s.row(mib(float64(rawBytes)), num(float64(rep.Frames)), fmt.Sprint(rep.Segments), dur(raw), dur(open),
		num(float64(rep.Bytes)/(1<<20)/open.Seconds()), ratio(raw.Seconds(), open.Seconds()))
	s.note("Ratio to raw read is raw read time ÷ Open time (100%% would mean replay costs no more than reading the bytes).")
}

// bareReplay opens the journal in dir with a replay that only counts, and
// closes it: the journal's own share of a restart.
func bareReplay(ctx context.Context, dir string) (time.Duration, int, error) {
	t0 := time.Now()
	j, rep, err := journal.Open(ctx, dir, journal.Options{Logger: quietLogger}, func(journal.Pos, []byte) error { return nil })
	d := time.Since(t0)
	if err != nil {
		return d, 0, err
	}
	return d, rep.Frames, j.Close()
}
