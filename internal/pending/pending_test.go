package pending_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/opkind"
	"github.com/opstatus/opstatus/internal/pending"
	"github.com/opstatus/opstatus/internal/queuemsg"
)

const (
	sub       = "aaaaaaaa-0000-4000-8000-000000000001"
	clusterID = "/api/aro_hcp/v1alpha1/clusters/c1"
	poolID    = clusterID + "/node_pools/np1"
	credID    = "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b1"
)

func TestActionable(t *testing.T) {
	noSub := fmt.Errorf("operation \"op\": %w: externalId \"/x\" is no ARM resource ID of a subscription", database.ErrNoSubscription)
	op := func(change func(*database.PendingOperation)) database.PendingOperation {
		p := database.PendingOperation{ID: "op", PartitionKey: sub, SubscriptionID: sub, Status: "Accepted", Request: "Create", InternalID: clusterID}
		if change != nil {
			change(&p)
		}
		return p
	}
	tests := []struct {
		name    string
		p       database.PendingOperation
		readErr error
		reason  string // "" when poll can act on it
		kind    opkind.Kind
	}{
		{"a new cluster create", op(nil), nil, "", opkind.Cluster},
		{"a node pool update", op(func(p *database.PendingOperation) { p.Status, p.Request, p.InternalID = "Updating", "Update", poolID }), nil, "", opkind.NodePool},
		{"a credential request", op(func(p *database.PendingOperation) { p.Request, p.InternalID = "RequestCredential", credID }), nil, "", opkind.CredentialRequest},
		{"finished: only notified, its internalId unread", op(func(p *database.PendingOperation) { p.Status, p.InternalID = "Succeeded", "" }), nil, "", ""},
		{"its subscription cannot be told", op(func(p *database.PendingOperation) { p.SubscriptionID = "" }), noSub, pending.ReasonSubscription, ""},
		{"an operation id Cosmos DB cannot hold", op(func(p *database.PendingOperation) { p.ID = "a/b" }), nil, pending.ReasonID, ""},
		{"a subscription id Cosmos DB cannot hold", op(func(p *database.PendingOperation) { p.SubscriptionID = "a?b" }), nil, pending.ReasonID, ""},
		{"an empty operation id", op(func(p *database.PendingOperation) { p.ID = "" }), nil, pending.ReasonID, ""},
		{"an unknown status", op(func(p *database.PendingOperation) { p.Status = "accepted" }), nil, opkind.ReasonStatus, ""},
		{"an unknown request", op(func(p *database.PendingOperation) { p.Request = "Patch" }), nil, opkind.ReasonRequest, ""},
		{"finished with an unknown request", op(func(p *database.PendingOperation) { p.Status, p.Request = "Failed", "" }), nil, opkind.ReasonRequest, ""},
		{"another service's path", op(func(p *database.PendingOperation) { p.InternalID = "/api/other/v1/clusters/x" }), nil, opkind.ReasonInternalID, ""},
		{"no internalId", op(func(p *database.PendingOperation) { p.InternalID = "" }), nil, opkind.ReasonInternalID, ""},
		{"a node pool's credential revocation", op(func(p *database.PendingOperation) { p.Request, p.InternalID = "RevokeCredentials", poolID }), nil, opkind.ReasonMismatch, ""},
		// The first rule that fails names the reason.
		{"no subscription and a bad id", op(func(p *database.PendingOperation) { p.ID = "a/b" }), noSub, pending.ReasonSubscription, ""},
		{"a bad id and an unknown status", op(func(p *database.PendingOperation) { p.ID, p.Status = "a#b", "x" }), nil, pending.ReasonID, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pending.Actionable(tt.p, tt.readErr)
			require.Equal(t, tt.reason, pending.Reason(err))
			it := pending.Item{SubscriptionID: tt.p.SubscriptionID, OperationID: tt.p.ID, Status: statusOf(tt.p), Request: requestOf(tt.p), InternalID: tt.p.InternalID}
			kind, _, checkErr := pending.Check(it)
			if tt.reason == "" {
				require.NoError(t, err)
				require.Equal(t, queuemsg.Operation{SubscriptionID: tt.p.SubscriptionID, OperationID: tt.p.ID}, got)
				require.NoError(t, checkErr, "poll acts on what scan and pickup take")
				require.Equal(t, tt.kind, kind)
				return
			}
			require.Error(t, err)
			require.Zero(t, got)
			if tt.readErr != nil {
				require.ErrorIs(t, err, database.ErrNoSubscription)
				require.Equal(t, tt.readErr.Error(), err.Error(), "the read's own text")
				return
			}
			require.Equal(t, tt.reason, pending.Reason(checkErr), "poll refuses what scan and pickup leave, for the same reason")
			require.Equal(t, err.Error(), checkErr.Error())
		})
	}
}

func statusOf(p database.PendingOperation) arm.ProvisioningState {
	return arm.ProvisioningState(p.Status)
}
func requestOf(p database.PendingOperation) arm.Request { return arm.Request(p.Request) }

func TestReason(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"another error", errors.New("unavailable"), ""},
		{"wrapped", fmt.Errorf("operation: %w", firstErr(pending.Actionable(database.PendingOperation{ID: "a/b", SubscriptionID: sub}, nil))), pending.ReasonID},
		{"opkind's", firstErr(pending.Actionable(database.PendingOperation{ID: "op", SubscriptionID: sub, Status: "x"}, nil)), opkind.ReasonStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pending.Reason(tt.err))
		})
	}
}

func firstErr(_ queuemsg.Operation, err error) error { return err }
