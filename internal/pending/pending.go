// Package pending holds the rules about pending operations that scan,
// pickup and poll share: which ones poll can act on (Actionable, Check),
// which ones are new (Initial, ForPickup), and which ones scan leaves to
// pickup (LeftToPickup). Each rule is here once, so that the three
// functions cannot disagree.
package pending

import (
	"errors"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/opkind"
	"github.com/opstatus/opstatus/internal/queuemsg"
)

// Reasons poll cannot act on an operation, beside opkind's; they are
// values of the `reason` attribute of opstatus.scan.skipped.
const (
	ReasonID           = "id"           // an id no Cosmos item can have
	ReasonSubscription = "subscription" // database.ErrNoSubscription: its externalId names no subscription, or another than its partition's
)

// Item is what the rule reads of an operation item.
type Item struct {
	SubscriptionID string
	OperationID    string
	Status         arm.ProvisioningState
	Request        arm.Request
	InternalID     string
}

// unactionable is an error of Actionable's or Check's that opkind has no
// reason for.
type unactionable struct {
	reason string
	err    error
}

func (u *unactionable) Error() string { return u.err.Error() }
func (u *unactionable) Unwrap() error { return u.err }

// Reason returns why err says poll cannot act on an operation:
// ReasonID, ReasonSubscription or one of opkind's reasons; "" for any
// other error.
func Reason(err error) string {
	if u, ok := errors.AsType[*unactionable](err); ok {
		return u.reason
	}
	return opkind.Reason(err)
}

// Check is the rule by which poll acts on an operation item, scan sends it
// and pickup takes it: its ids pass queuemsg.Operation.Check, and
// opkind.Check gives it a kind, or it is finished (kind ""). The error's
// text quotes the item's fields, bounded; Reason tells why.
func Check(it Item) (opkind.Kind, clusterservice.InternalID, error) {
	op := queuemsg.Operation{SubscriptionID: it.SubscriptionID, OperationID: it.OperationID}
	if err := op.Check(); err != nil {
		return "", clusterservice.InternalID{}, &unactionable{reason: ReasonID, err: err}
	}
	return opkind.Check(it.Status, it.Request, it.InternalID)
}

// Actionable applies Check to an operation as
// database.OperationsPartition.ReadPending read it, with readErr, and
// returns the queue message's name for it. readErr is nil, or one that
// wraps database.ErrNoSubscription: nothing can be written under the lock
// of a subscription that cannot be told.
func Actionable(p database.PendingOperation, readErr error) (queuemsg.Operation, error) {
	if readErr != nil {
		return queuemsg.Operation{}, &unactionable{reason: ReasonSubscription, err: readErr}
	}
	it := Item{SubscriptionID: p.SubscriptionID, OperationID: p.ID, Status: arm.ProvisioningState(p.Status),
		Request: arm.Request(p.Request), InternalID: p.InternalID}
	if _, _, err := Check(it); err != nil {
		return queuemsg.Operation{}, err
	}
	return queuemsg.Operation{SubscriptionID: p.SubscriptionID, OperationID: p.ID}, nil
}
