package testenv

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"
)

func TestAzuriteQueueRoundTrip(t *testing.T) {
	t.Parallel()
	azurite := SharedAzurite(t)
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

// dev/azurite/server.js changes how Azurite's store removes, finds and
// indexes messages: every message must still come out exactly once, in
// order, and expire on time.
func TestAzuriteQueueKeepsEveryMessage(t *testing.T) {
	t.Parallel()
	azurite := SharedAzurite(t)
	service, err := azqueue.NewServiceClientFromConnectionString(azurite.ConnectionString, nil)
	require.NoError(t, err)
	_, err = service.CreateQueue(t.Context(), "many", nil)
	require.NoError(t, err)
	queue := service.NewQueueClient("many")
	hidden := &azqueue.DequeueMessagesOptions{NumberOfMessages: ptr[int32](32), VisibilityTimeout: ptr[int32](60)}

	const n = 200
	var want []string
	for i := range n {
		text := fmt.Sprintf("m%03d", i)
		want = append(want, text)
		_, err := queue.EnqueueMessage(t.Context(), text, nil)
		require.NoError(t, err)
	}

	// The first batch comes in order. Delete every other message, make the
	// rest visible again at once, and check a stale pop receipt is refused.
	resp, err := queue.DequeueMessages(t.Context(), hidden)
	require.NoError(t, err)
	require.Len(t, resp.Messages, 32)
	deleted := map[string]bool{}
	for i, m := range resp.Messages {
		require.Equal(t, want[i], *m.MessageText)
		if i%2 == 0 {
			_, err := queue.DeleteMessage(t.Context(), *m.MessageID, *m.PopReceipt, nil)
			require.NoError(t, err)
			deleted[*m.MessageText] = true
			continue
		}
		_, err := queue.UpdateMessage(t.Context(), *m.MessageID, *m.PopReceipt, *m.MessageText,
			&azqueue.UpdateMessageOptions{VisibilityTimeout: ptr[int32](0)})
		require.NoError(t, err)
		_, err = queue.DeleteMessage(t.Context(), *m.MessageID, *m.PopReceipt, nil)
		require.Error(t, err, "the pop receipt changed with the update")
	}

	// Drain: every message not deleted comes out once.
	seen := map[string]int{}
	for {
		resp, err := queue.DequeueMessages(t.Context(), hidden)
		require.NoError(t, err)
		if len(resp.Messages) == 0 {
			break
		}
		for _, m := range resp.Messages {
			seen[*m.MessageText]++
			_, err := queue.DeleteMessage(t.Context(), *m.MessageID, *m.PopReceipt, nil)
			require.NoError(t, err)
		}
	}
	require.Len(t, seen, n-len(deleted))
	for _, text := range want {
		if deleted[text] {
			require.Zero(t, seen[text], text)
		} else {
			require.Equal(t, 1, seen[text], text)
		}
	}
	props, err := queue.GetProperties(t.Context(), nil)
	require.NoError(t, err)
	require.Zero(t, *props.ApproximateMessagesCount)

	// Expired messages disappear; the others stay.
	for _, text := range []string{"short1", "short2"} {
		_, err := queue.EnqueueMessage(t.Context(), text, &azqueue.EnqueueMessageOptions{TimeToLive: ptr[int32](1)})
		require.NoError(t, err)
	}
	_, err = queue.EnqueueMessage(t.Context(), "lasting", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := queue.PeekMessages(t.Context(), &azqueue.PeekMessagesOptions{NumberOfMessages: ptr[int32](32)})
		return err == nil && len(resp.Messages) == 1 && *resp.Messages[0].MessageText == "lasting"
	}, 10*time.Second, 100*time.Millisecond)
}

func TestAzuriteQueueAlone(t *testing.T) {
	t.Parallel()
	NeedsServers(t)
	q, err := StartAzuriteQueue(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Stop()) })
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/devstoreaccount1$`, q.QueueEndpoint)
	require.Empty(t, q.BlobEndpoint)
	require.Empty(t, q.TableEndpoint)
	require.NotContains(t, q.ConnectionString, "BlobEndpoint")

	service, err := azqueue.NewServiceClientFromConnectionString(q.ConnectionString, nil)
	require.NoError(t, err)
	_, err = service.CreateQueue(t.Context(), "alone", nil)
	require.NoError(t, err)
	_, err = service.NewQueueClient("alone").EnqueueMessage(t.Context(), "hello", nil)
	require.NoError(t, err)
	resp, err := service.NewQueueClient("alone").PeekMessage(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, resp.Messages, 1)
	require.Equal(t, "hello", *resp.Messages[0].MessageText)
}
