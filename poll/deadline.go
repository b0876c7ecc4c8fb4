package poll

import (
	"time"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
)

// Deadlines say how long after its startTime an operation of each request
// may stay unfinished before poll ends it Failed; zero means no deadline.
type Deadlines struct {
	Create, Update, Delete               time.Duration
	RequestCredential, RevokeCredentials time.Duration
}

func (d Deadlines) of(r arm.Request) time.Duration {
	switch r {
	case arm.RequestCreate:
		return d.Create
	case arm.RequestUpdate:
		return d.Update
	case arm.RequestDelete:
		return d.Delete
	case arm.RequestRequestCredential:
		return d.RequestCredential
	case arm.RequestRevokeCredentials:
		return d.RevokeCredentials
	}
	return 0
}

// pastDeadline returns op's deadline when op has passed it at now; 0
// otherwise, and for an operation whose item has no startTime.
func (d Deadlines) pastDeadline(op *database.Operation, now time.Time) time.Duration {
	limit := d.of(op.Request)
	if limit <= 0 || op.StartTime.IsZero() || now.Sub(op.StartTime) <= limit {
		return 0
	}
	return limit
}
