package scan

import (
	"time"

	"github.com/opstatus/opstatus/internal/arm"
)

// ForPickup reports whether an operation is the pickup function's to check
// first rather than scan's: its status is Accepted, which only the
// frontend writes (every write opstatus makes moves the status on or
// clears notificationUri), and its last write (the item's _ts, lastWrite)
// is less than one scan interval before now. The change feed brings pickup
// that write within seconds; scan sends the operation once the interval
// has passed, if it is still Accepted, so that between them it is checked
// at most once an interval, and still within two if pickup missed it. A
// lastWrite that is zero, or an interval or more ahead of now, is not
// believed: such an operation is scan's.
func ForPickup(status string, lastWrite, now time.Time, interval time.Duration) bool {
	if status != string(arm.ProvisioningStateAccepted) || lastWrite.IsZero() || interval <= 0 {
		return false
	}
	age := now.Sub(lastWrite)
	return age < interval && age > -interval
}
