package poll_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// The 2024-10 frontend cancels an operation by writing status Canceled
// alone. ARM requires an error on Canceled, so its notification carries
// code Canceled and ARO-HCP's message, while the item keeps what the
// frontend wrote (no error) and Cluster Service is not asked.
func TestFrontendCanceledIsNotifiedWithAnError(t *testing.T) {
	f := newFixture(t)
	ended := f.now.Add(-time.Minute)
	f.putOp(database.Operation{ID: "np-create", Request: arm.RequestCreate, Status: arm.ProvisioningStateCanceled,
		StartTime: ended.Add(-time.Minute), LastTransitionTime: ended, NotificationURI: f.armURL,
		ExternalID: cmPoolKey, InternalID: cmPoolCS,
		OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/np-create"})

	require.Equal(t, poll.OutcomeNotified, f.poll(t, "np-create"))
	got := f.arm.got()
	require.Len(t, got, 1)
	require.Equal(t, arm.ProvisioningStateCanceled, got[0].Status)
	require.Equal(t, &arm.CloudErrorBody{Code: "Canceled", Message: "This operation was superseded by another"}, got[0].Error)
	op := f.op(t, "np-create")
	require.Nil(t, op.Error, "the item keeps the frontend's words")
	require.Empty(t, op.NotificationURI)
	require.Zero(t, f.cs.Calls())
}
