package database

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Errors of the rule that tells an operation's subscription; test with
// errors.Is.
var (
	// ErrNoSubscription means that an operation's subscription cannot be
	// told: in a fixed Operations partition, its externalId names none, or
	// it is an item of another partition. Nothing can be written for it:
	// the lock, Resources and Billing items are its subscription's.
	ErrNoSubscription = errors.New("the operation's subscription cannot be told")
	// ErrOtherSubscription means that the operation read for one
	// subscription is another's: in a fixed Operations partition, its
	// externalId names another subscription than the one asked for.
	ErrOtherSubscription = errors.New("the operation is another subscription's")
)

// OperationsPartition is where the frontend writes the Operations items:
// each in the partition of its subscription (the zero value), or all in one
// fixed partition, whose key it is (COSMOS_OPERATIONS_PARTITION_KEY;
// ARO-HCP's frontend wrote "workaround" while azcosmos could not query
// across partitions). It holds the one rule by which the DBClients, scan,
// pickup and poll tell an operation's subscription, whose lock, Resources
// and Billing items and queue messages are the operation's.
type OperationsPartition string

// Fixed reports whether every Operations item is in one fixed partition.
func (p OperationsPartition) Fixed() bool { return p != "" }

// Key returns the partition key of the Operations items of subscription
// sub: its lowercase ID, or the fixed key as it is.
func (p OperationsPartition) Key(sub string) string {
	if p.Fixed() {
		return string(p)
	}
	return strings.ToLower(sub)
}

// Subscription returns the subscription of the Operations item whose
// partitionKey and externalId these are: the subscription of its
// externalId (the ARM resource ID /subscriptions/{subscription}/…),
// lowercase as the partition keys of the subscription's items are, in the
// partition the frontend writes it in: the fixed one, or the one keyed by
// that subscription (ignoring case). ErrNoSubscription when it cannot be
// told: the externalId names none, or the item is in another partition,
// such as a fixed one opstatus was not told of.
func (p OperationsPartition) Subscription(partitionKey, externalID string) (string, error) {
	if p.Fixed() && partitionKey != string(p) {
		return "", fmt.Errorf("%w: the item is in partition %s, not in the Operations partition %s",
			ErrNoSubscription, QuoteID(partitionKey), QuoteID(string(p)))
	}
	sub, ok := subscriptionOf(externalID)
	if !ok && !p.Fixed() {
		return partitionKey, nil
	}
	if !ok {
		return "", fmt.Errorf("%w: externalId %s is no ARM resource ID of a subscription", ErrNoSubscription, QuoteID(externalID))
	}
	if !p.Fixed() && !strings.EqualFold(partitionKey, sub) {
		return "", fmt.Errorf("%w: the item is in partition %s, and its externalId is of subscription %s (is COSMOS_OPERATIONS_PARTITION_KEY unset for a frontend that writes one fixed partition?)",
			ErrNoSubscription, QuoteID(partitionKey), QuoteID(sub))
	}
	return sub, nil
}

// subscriptionOf returns the lowercase subscription of an ARM resource
// ID, whose first two segments are "subscriptions" (in any case) and the
// subscription.
func subscriptionOf(resourceID string) (string, bool) {
	rest, ok := cutPrefixFold(resourceID, "/subscriptions/")
	if !ok {
		return "", false
	}
	sub, _, _ := strings.Cut(rest, "/")
	if sub == "" || !utf8.ValidString(sub) {
		return "", false
	}
	return strings.ToLower(sub), true
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// Tell sets op's subscription (Operation.SubscriptionID) by Subscription;
// the DBClients tell every operation they return.
func (p OperationsPartition) Tell(op *Operation) error {
	sub, err := p.Subscription(op.PartitionKey, op.ExternalID)
	if err != nil {
		return fmt.Errorf("operation %s: %w", QuoteID(op.ID), err)
	}
	op.subscription = sub
	return nil
}

// ReadOperation decodes raw, the Operations item read as the operation of
// subscription sub, and tells its subscription: ErrMalformed when it does
// not decode, ErrNoSubscription when its subscription cannot be told, and
// ErrOtherSubscription when it is not sub (ignoring case), which only a
// fixed partition, shared by every subscription, can hold.
func (p OperationsPartition) ReadOperation(raw []byte, sub string) (*Operation, error) {
	var op Operation
	if err := op.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := p.Tell(&op); err != nil {
		return nil, err
	}
	if !strings.EqualFold(op.subscription, sub) {
		return nil, fmt.Errorf("%w: operation %s was read for subscription %s, and its externalId is of %s",
			ErrOtherSubscription, QuoteID(op.ID), QuoteID(sub), QuoteID(op.subscription))
	}
	return &op, nil
}

// ReadPending reads an Operations item, whole or as the pending query
// projects it, as scan and pickup need it: ErrMalformed when its id or
// partitionKey is not a non-empty string; ErrNoSubscription, with the
// operation as read, when its subscription cannot be told.
func (p OperationsPartition) ReadPending(raw []byte) (PendingOperation, error) {
	var op PendingOperation
	if err := json.Unmarshal(raw, &op); err != nil || op.ID == "" || op.PartitionKey == "" {
		return PendingOperation{}, fmt.Errorf("%w: pending operation %.200s", ErrMalformed, raw)
	}
	op.ReadDetails(raw)
	sub, err := p.Subscription(op.PartitionKey, op.ExternalID)
	if err != nil {
		return op, fmt.Errorf("operation %s: %w", QuoteID(op.ID), err)
	}
	op.SubscriptionID = sub
	return op, nil
}
