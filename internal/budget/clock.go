package budget

import "time"

// Instant is a reading of a process's clock: the wall clock and the
// monotonic one, kept apart so that each rule can take the one that errs
// on the safe side.
type Instant struct {
	Wall time.Time
	Mono time.Duration
}

// Clock is the process's clock.
type Clock interface {
	Now() Instant
	// After fires once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the process's real clock.
type SystemClock struct{}

var origin = time.Now()

// Now reads the wall clock and the monotonic one (time since the package
// loaded).
func (SystemClock) Now() Instant {
	now := time.Now()
	return Instant{Wall: now.Round(0), Mono: now.Sub(origin)}
}

// After is time.After.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// heldFor is how long ago since was for a holder: the larger of the
// monotonic and the wall clock's elapsed time, so that neither a stopped
// monotonic clock (a suspended VM) nor a wall clock set back stretches a
// lease.
func heldFor(since, now Instant) time.Duration {
	return max(now.Mono-since.Mono, now.Wall.Sub(since.Wall))
}

// seenFor is how long ago since was for an observer waiting to reclaim or
// to take permits: the monotonic clock only, so that a wall clock set
// ahead cannot shorten the wait.
func seenFor(since, now Instant) time.Duration {
	return now.Mono - since.Mono
}
