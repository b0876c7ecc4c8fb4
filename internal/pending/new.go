package pending

import (
	"time"

	"github.com/opstatus/opstatus/internal/arm"
)

// Initial reports whether status is the one the frontend creates an
// operation of request in: Deleting for a Delete (so that a second delete
// of the resource is refused with 409 Conflict), Accepted for every other
// request. opstatus never writes an operation back into it: Accepted is
// never an answer, and a Delete that is Deleting stays so until it ends.
func Initial(status, request string) bool {
	if request == string(arm.RequestDelete) {
		return status == string(arm.ProvisioningStateDeleting)
	}
	return status == string(arm.ProvisioningStateAccepted)
}

// ForPickup reports whether an operation is new, and so the pickup
// function's to check first rather than scan's: its status is its
// request's initial one (Initial), and its last write (the item's _ts,
// lastWrite, to the second, so the write's latest possible instant) is
// less than one scan interval before now. The change feed brings pickup
// that write within seconds. A Create or Update that opstatus moved to
// Deleting is not new.
func ForPickup(status, request string, lastWrite, now time.Time, interval time.Duration) bool {
	return Initial(status, request) && recent(latest(lastWrite), now, interval)
}

// LeftToPickup reports whether scan leaves an operation alone while pickup
// runs: it is pickup's to check (ForPickup), or pickup has checked it and
// opstatus has written the answer: its startTime and its last write are
// both less than an interval old, and scan sends nothing in an operation's
// first interval, so that write answered pickup's check. Scan sends it
// once its last write is an interval old: an operation is checked at most
// once an interval, and within two if pickup missed it. An operation the
// frontend created in another status than its request's initial one is
// pickup's neither; scan sends it after its first interval.
func LeftToPickup(status, request string, startTime, lastWrite, now time.Time, interval time.Duration) bool {
	return ForPickup(status, request, lastWrite, now, interval) ||
		(recent(startTime, now, interval) && recent(latest(lastWrite), now, interval))
}

// latest returns the latest instant a write whose _ts is lastWrite can
// have happened: _ts counts whole seconds, so the write was up to a second
// after it. Judged from _ts itself, an operation pickup checked late in a
// second would be sent by scan up to a second before its interval is out.
func latest(lastWrite time.Time) time.Time {
	if lastWrite.IsZero() {
		return lastWrite
	}
	return lastWrite.Add(time.Second)
}

// recent reports whether t is less than an interval before now. A t that
// is zero, or an interval or more ahead of now, is not believed, nor is
// anything without an interval.
func recent(t, now time.Time, interval time.Duration) bool {
	if t.IsZero() || interval <= 0 {
		return false
	}
	age := now.Sub(t)
	return age < interval && age > -interval
}
