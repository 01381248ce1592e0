// Package membudget bounds the memory the host holds for request and
// response bodies in flight: the worker fetch route's request and response
// bodies, outbound fetches' bodies and producer Binding sends.
//
// Why: a body is held in the host's memory while the invocation that
// carries it runs, and nothing else bounded how many were held at once.
// Concurrent 8 MiB requests to one worker's fetch route cost the host about
// 50 MB each and, 96 at once, ran it out of memory in its cgroup, taking
// every space down (issue 36). So every body is reserved here before it is
// buffered (its Content-Length when known, else as it arrives), and a
// reservation that does not fit fails at once, with an error saying
// whose share is used up, instead of waiting: the caller answers 503 with
// Retry-After (or rejects the worker's call), and nothing is buffered.
//
// The budget has three levels: the host's total, a share per principal
// (the one whose request invoked the worker, else the version's creator)
// and a share per worker, each a fraction of the total, so that one tenant
// holding its whole share leaves the others room.
package membudget

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrBusy is wrapped by the error of a reservation that does not fit now:
// the host's total, the principal's share or the worker's share is in use.
// Retrying later may succeed.
var ErrBusy = errors.New("the host's memory for bodies in flight is in use")

// ErrTooLarge is wrapped by the error of a reservation that could never
// fit: larger than the share it is charged to.
var ErrTooLarge = errors.New("larger than the host's memory share for one worker")

// BusyError says which share a reservation did not fit in.
type BusyError struct {
	Share     string // "host", "principal" or "worker"
	Used, Max int64  // the share's bytes in use and its size
	Want      int64  // the bytes asked for
}

func (e *BusyError) Error() string {
	who := map[string]string{"host": "the host", "principal": "this principal", "worker": "this worker"}[e.Share]
	return fmt.Sprintf("%v: %s holds %s of bodies in flight, its share is %s, and %s more were asked for; retry later",
		ErrBusy, who, mib(e.Used), mib(e.Max), mib(e.Want))
}

func (e *BusyError) Unwrap() error { return ErrBusy }

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// Holder is whom a reservation is charged to.
type Holder struct {
	Principal string // the principal's ID ("" charges no principal share)
	Worker    string // the ModuleWorker's UID ("" charges no worker share)
}

// Limits sizes a Budget. Zero shares default to a half (principal) and a
// quarter (worker) of Total.
type Limits struct {
	Total        int64
	PerPrincipal int64
	PerWorker    int64
}

// Budget is the host's budget. A nil *Budget reserves without limit.
type Budget struct {
	lim Limits

	mu         sync.Mutex
	used, peak int64
	principals map[string]int64
	workers    map[string]int64
	refused    int64
}

// New returns a budget of lim.
func New(lim Limits) *Budget {
	if lim.PerPrincipal <= 0 || lim.PerPrincipal > lim.Total {
		lim.PerPrincipal = lim.Total / 2
	}
	if lim.PerWorker <= 0 || lim.PerWorker > lim.Total {
		lim.PerWorker = lim.Total / 4
	}
	return &Budget{lim: lim, principals: map[string]int64{}, workers: map[string]int64{}}
}

// Limits are the budget's sizes (zero for a nil budget).
func (b *Budget) Limits() Limits {
	if b == nil {
		return Limits{}
	}
	return b.lim
}

// Used is the bytes reserved now; Peak the most reserved at once since the
// start; Refused how many reservations failed.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *Budget) Peak() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

func (b *Budget) Refused() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// Reservation is bytes held against a budget until Release.
type Reservation struct {
	b    *Budget
	h    Holder
	n    int64
	done bool
}

// Reserve charges n bytes to h, or fails without charging anything: with
// an error wrapping ErrTooLarge when n exceeds a share h is charged to,
// else wrapping ErrBusy (a *BusyError) when a share cannot take n now.
func (b *Budget) Reserve(h Holder, n int64) (*Reservation, error) {
	r := &Reservation{b: b, h: h}
	if err := r.Grow(n); err != nil {
		return nil, err
	}
	return r, nil
}

// Grow charges n more bytes to the reservation (a body read as it
// arrives), or fails as Reserve does, leaving what it holds.
func (r *Reservation) Grow(n int64) error {
	if r == nil {
		return nil
	}
	b := r.b
	if b == nil || n <= 0 {
		r.n += max(n, 0)
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.done {
		return errors.New("membudget: the reservation was released")
	}
	want := r.n + n
	if r.h.Worker != "" && want > b.lim.PerWorker || r.h.Principal != "" && want > b.lim.PerPrincipal || want > b.lim.Total {
		b.refused++
		return fmt.Errorf("%w (%s, the share is %s)", ErrTooLarge, mib(want), mib(min(b.lim.PerWorker, b.lim.PerPrincipal, b.lim.Total)))
	}
	var busy *BusyError
	switch {
	case b.used+n > b.lim.Total:
		busy = &BusyError{Share: "host", Used: b.used, Max: b.lim.Total, Want: n}
	case r.h.Principal != "" && b.principals[r.h.Principal]+n > b.lim.PerPrincipal:
		busy = &BusyError{Share: "principal", Used: b.principals[r.h.Principal], Max: b.lim.PerPrincipal, Want: n}
	case r.h.Worker != "" && b.workers[r.h.Worker]+n > b.lim.PerWorker:
		busy = &BusyError{Share: "worker", Used: b.workers[r.h.Worker], Max: b.lim.PerWorker, Want: n}
	}
	if busy != nil {
		b.refused++
		return busy
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	if r.h.Principal != "" {
		b.principals[r.h.Principal] += n
	}
	if r.h.Worker != "" {
		b.workers[r.h.Worker] += n
	}
	r.n += n
	return nil
}

// Size is the bytes the reservation holds.
func (r *Reservation) Size() int64 {
	if r == nil {
		return 0
	}
	return r.n
}

// Release gives the reservation's bytes back; later calls do nothing. A nil
// reservation may be released.
func (r *Reservation) Release() {
	if r == nil || r.b == nil {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	b.used -= r.n
	if r.h.Principal != "" {
		if b.principals[r.h.Principal] -= r.n; b.principals[r.h.Principal] <= 0 {
			delete(b.principals, r.h.Principal)
		}
	}
	if r.h.Worker != "" {
		if b.workers[r.h.Worker] -= r.n; b.workers[r.h.Worker] <= 0 {
			delete(b.workers, r.h.Worker)
		}
	}
	r.n = 0
}

// ErrOverLimit is ReadBody's error for a body over its max.
var ErrOverLimit = errors.New("the body is larger than the limit")

// ReadBody reads r (whose declared length is contentLength, -1 when
// unknown) into one buffer of at most limit bytes, charging res before
// every byte is buffered: the declared length at once, else each growth
// of the buffer (doubling from 64 KiB) before it is made. It fails with
// ErrOverLimit over limit, and with the reservation's error when the budget
// cannot take the body; what res holds then stays held (release it).
func ReadBody(r io.Reader, contentLength int64, limit int, res *Reservation) ([]byte, error) {
	if contentLength > int64(limit) {
		return nil, ErrOverLimit
	}
	if contentLength >= 0 {
		if err := res.Grow(contentLength); err != nil {
			return nil, err
		}
		b := make([]byte, contentLength)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		// A body longer than it said is over its declared length.
		var one [1]byte
		if n, _ := r.Read(one[:]); n > 0 {
			return nil, fmt.Errorf("the body is longer than its Content-Length %d", contentLength)
		}
		return b, nil
	}
	var b []byte
	for {
		if len(b) == cap(b) {
			next := min(max(2*cap(b), 64<<10), limit+1)
			if err := res.Grow(int64(next - cap(b))); err != nil {
				return nil, err
			}
			b = append(make([]byte, 0, next), b...)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) > limit {
			return nil, ErrOverLimit
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
