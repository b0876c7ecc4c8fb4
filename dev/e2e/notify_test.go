package e2e

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// An operation the frontend ended itself is notified with the error ARM's
// asynchronous-operations contract requires of Failed and Canceled, by the
// rule poll writes its own ends with, and its item is left as the frontend
// wrote it but for the cleared notificationUri: the seed frontend cancels
// by writing only status Canceled, and a Failed may lack a message.
func TestFrontendsEndsAreNotifiedWithAnError(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	for _, tc := range []struct {
		id, status string
		err        map[string]any // as the frontend wrote it
		want       map[string]any // in the notification
	}{
		{id: "op-canceled", status: "Canceled",
			want: map[string]any{"code": "Canceled", "message": "This operation was superseded by another"}},
		{id: "op-failed", status: "Failed", err: map[string]any{"code": "Conflict", "target": "t"},
			want: map[string]any{"code": "Conflict", "message": "Internal server error.", "target": "t"}},
		{id: "op-succeeded", status: "Succeeded", err: map[string]any{"code": "Old", "message": "a leftover"}},
	} {
		t.Run(tc.id, func(t *testing.T) {
			s.seed(subA, tc.id, "Create", tc.status, clusterKey(subA, tc.id), "/api/aro_hcp/v1alpha1/clusters/"+tc.id)
			item, err := s.fe.Operation(ctx, subA, tc.id)
			require.NoError(t, err)
			if tc.err != nil {
				item["error"] = tc.err
			}
			body, err := json.Marshal(item)
			require.NoError(t, err)
			require.NoError(t, s.fe.PutRawOperation(ctx, subA, body))
			before, err := s.fe.Operation(ctx, subA, tc.id)
			require.NoError(t, err)

			require.Equal(t, "notified", s.pollOp(subA, tc.id))
			var got map[string]any
			for _, n := range s.arm.Bodies() {
				if n["name"] == tc.id {
					got = n
				}
			}
			require.NotNil(t, got, "ARM notified")
			require.Equal(t, tc.status, got["status"])
			if tc.want == nil {
				require.NotContains(t, got, "error")
			} else {
				require.Equal(t, tc.want, got["error"])
			}

			after, err := s.fe.Operation(ctx, subA, tc.id)
			require.NoError(t, err)
			require.Empty(t, after["notificationUri"])
			for _, k := range []string{"_etag", "_ts", "notificationUri"} {
				delete(before, k)
				delete(after, k)
			}
			require.Equal(t, before, after, "the item as the frontend wrote it")
		})
	}
}
