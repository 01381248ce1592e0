package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a deterministic clock for tests. Its time changes only through
// Advance and Set. It is safe for concurrent use.
//
// Timers armed with AfterFunc or Reset fire during Advance, one at a time,
// in order of their due time (ties in the order they were armed), each with
// the fake time set to its due time and with no lock of the Fake held, so a
// callback may arm further timers; those fire in the same Advance when they
// fall due before its target. A timer armed with d <= 0 is due at once: it
// fires at the next Advance (Advance(0) fires it).
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	armed   map[*fakeTimer]struct{}
	changed chan struct{} // closed and replaced whenever the armed set changes
	fired   int
}

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, armed: map[*fakeTimer]struct{}{}, changed: make(chan struct{})}
}

type fakeTimer struct {
	f    *Fake
	fn   func()
	when time.Time
	seq  uint64
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc arms a timer that calls fn once the fake time reaches Now()+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	f.mu.Lock()
	f.armLocked(t, d)
	f.mu.Unlock()
	return t
}

func (f *Fake) armLocked(t *fakeTimer, d time.Duration) {
	if d < 0 {
		d = 0
	}
	f.seq++
	t.when = f.now.Add(d)
	t.seq = f.seq
	f.armed[t] = struct{}{}
	f.changedLocked()
}

func (f *Fake) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.armed[t]
	if ok {
		delete(t.f.armed, t)
		t.f.changedLocked()
	}
	return ok
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.armed[t]
	t.f.armLocked(t, d)
	return ok
}

// Advance moves the fake time forward by d, firing every timer that falls
// due on the way, in time order, synchronously. When it returns, the time is
// the old time plus d and every callback it ran has returned.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.advanceTo(target)
}

// Set moves the fake time to t (which must not be before Now), firing due
// timers as Advance does.
func (f *Fake) Set(t time.Time) { f.advanceTo(t) }

func (f *Fake) advanceTo(target time.Time) {
	for {
		f.mu.Lock()
		var next *fakeTimer
		for t := range f.armed {
			if t.when.After(target) {
				continue
			}
			if next == nil || t.when.Before(next.when) || (t.when.Equal(next.when) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			if target.After(f.now) {
				f.now = target
			}
			f.mu.Unlock()
			return
		}
		if next.when.After(f.now) {
			f.now = next.when
		}
		delete(f.armed, next)
		f.fired++
		f.changedLocked()
		fn := next.fn
		f.mu.Unlock()
		fn()
	}
}

// Pending returns how many timers are armed.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.armed)
}

// Fired returns how many timer callbacks have been run so far.
func (f *Fake) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// Next returns the due time of the earliest armed timer, and false if none
// is armed.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best *fakeTimer
	for t := range f.armed {
		if best == nil || t.when.Before(best.when) {
			best = t
		}
	}
	if best == nil {
		return time.Time{}, false
	}
	return best.when, true
}

// BlockUntil waits until at least n timers are armed, or ctx ends (its error
// is returned). It lets a test wait for a goroutine to arm its timer without
// sleeping.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.armed) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
