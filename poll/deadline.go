package poll

import (
	"fmt"
	"time"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
)

// Deadlines say how long after its startTime an operation of each request
// may stay unfinished before poll ends it Failed; zero means no deadline.
type Deadlines struct {
	Create, Update, Delete time.Duration
}

func (d Deadlines) of(r arm.Request) time.Duration {
	switch r {
	case arm.RequestCreate:
		return d.Create
	case arm.RequestUpdate:
		return d.Update
	case arm.RequestDelete:
		return d.Delete
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

// deadlineChange ends an operation that has passed its deadline: Failed,
// InternalServerError, with what Cluster Service last said when it said
// anything.
func deadlineChange(limit time.Duration, st clusterservice.Status) *change {
	msg := fmt.Sprintf("The operation did not complete within its deadline of %s.", limit)
	switch {
	case st.ErrorMessage != "":
		msg += " Cluster Service: " + st.ErrorMessage
	case st.Description != "":
		msg += " Cluster Service: " + st.Description
	}
	failed := clusterservice.Decision{
		State:  arm.ProvisioningStateFailed,
		Error:  &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg},
		Change: true,
	}
	return &change{pastDeadline: true, decide: func(*database.Operation) clusterservice.Decision { return failed }}
}
