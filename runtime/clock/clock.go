// Package clock abstracts time for the delivery engine so that its
// scheduling (batch fill timeouts, retry delays, retention, handler time
// limits) can be driven deterministically in tests.
//
// Real returns the system clock. Fake is a manual clock: time moves only
// when Advance is called, and Advance runs every timer that falls due, in
// time order, synchronously in the caller's goroutine.
package clock

import "time"

// Clock tells the time and schedules callbacks.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (Real) or in the goroutine
	// that advances the clock (Fake) once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call made by AfterFunc. It has the semantics of
// *time.Timer made by time.AfterFunc: Stop prevents the call if it has not
// happened yet and reports whether it did so; Reset re-arms the timer to fire
// after d and reports whether it had been active.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// IsReal reports whether c is the system clock returned by Real.
func IsReal(c Clock) bool {
	_, ok := c.(realClock)
	return ok
}
