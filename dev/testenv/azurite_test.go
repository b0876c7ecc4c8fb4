package testenv

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"
)

func TestAzuriteQueueRoundTrip(t *testing.T) {
	t.Parallel()
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/devstoreaccount1$`, azurite.QueueEndpoint)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/devstoreaccount1$`, azurite.BlobEndpoint)

	service, err := azqueue.NewServiceClientFromConnectionString(azurite.ConnectionString, nil)
	require.NoError(t, err)
	_, err = service.CreateQueue(t.Context(), "operations", nil)
	require.NoError(t, err)
	queue := service.NewQueueClient("operations")

	const message = `{"subscriptionId":"sub","operationId":"op"}`
	_, err = queue.EnqueueMessage(t.Context(), message, nil)
	require.NoError(t, err)

	resp, err := queue.DequeueMessage(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, resp.Messages, 1)
	got := resp.Messages[0]
	require.Equal(t, message, *got.MessageText)
	_, err = queue.DeleteMessage(t.Context(), *got.MessageID, *got.PopReceipt, nil)
	require.NoError(t, err)

	resp, err = queue.DequeueMessage(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, resp.Messages)
}
