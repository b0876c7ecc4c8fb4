package faultproxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
)

// itemCounts keeps the counts of item requests (not account or metadata).
func itemCounts(p *faultproxy.Proxy) map[faultproxy.CountKey]int64 {
	out := map[faultproxy.CountKey]int64{}
	for k, v := range p.Counts() {
		if k.Kind != faultproxy.KindMeta {
			out[k] = v
		}
	}
	return out
}

func TestCounts(t *testing.T) {
	t.Parallel()
	p, c := setup(t, clientConfig{})
	ctx := t.Context()
	// setup read a missing item to warm the client up.
	require.Equal(t, map[faultproxy.CountKey]int64{
		{Container: "Operations", Kind: faultproxy.KindRead, Status: http.StatusNotFound}: 1,
	}, itemCounts(p))
	require.NotZero(t, p.Counts()[faultproxy.CountKey{Kind: faultproxy.KindMeta, Status: http.StatusOK}], "the account read")

	p.ResetCounts()
	require.Empty(t, p.Counts())

	created, err := c.ops.CreateItem(ctx, pk("sub1"), mustJSON(t, opItem("op1", "sub1")), nil)
	require.NoError(t, err)
	readItem(t, c.ops, "sub1", "op1")
	readItem(t, c.ops, "sub1", "op1")
	pager := c.ops.NewQueryItemsPager("SELECT * FROM c", pk("sub1"), nil)
	for pager.More() {
		_, err := pager.NextPage(ctx)
		require.NoError(t, err)
	}
	_, err = c.ops.ReplaceItem(ctx, pk("sub1"), "op1", mustJSON(t, opItem("op1", "sub1")),
		&azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
	require.NoError(t, err)
	// The etag is stale now: 412.
	_, err = c.ops.ReplaceItem(ctx, pk("sub1"), "op1", mustJSON(t, opItem("op1", "sub1")),
		&azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
	require.Equal(t, http.StatusPreconditionFailed, statusOf(err), "%v", err)
	_, err = c.locks.UpsertItem(ctx, pk("sub1"), mustJSON(t, map[string]any{"id": "sub1", "owner": "me"}), nil)
	require.NoError(t, err)
	_, err = c.locks.CreateItem(ctx, pk("sub1"), mustJSON(t, map[string]any{"id": "sub1", "owner": "other"}), nil)
	require.Equal(t, http.StatusConflict, statusOf(err), "%v", err)
	_, err = c.locks.DeleteItem(ctx, pk("sub1"), "sub1", nil)
	require.NoError(t, err)

	// Injected faults are counted with the status the client got.
	p.SetFaults(faultproxy.Faults{Rate429: 1, RetryAfter: time.Millisecond, Match: onlyItems})
	_, err = c.ops.ReadItem(ctx, pk("sub1"), "op1", nil)
	require.Equal(t, http.StatusTooManyRequests, statusOf(err), "%v", err)
	p.SetFaults(faultproxy.Faults{RateDrop: 1, Match: onlyItems})
	_, err = c.ops.DeleteItem(ctx, pk("sub1"), "op1", nil)
	require.Error(t, err)
	p.SetFaults(faultproxy.Faults{})

	counts := itemCounts(p)
	// azcore retries a dropped connection on its own; count it, whatever it is.
	dropped := counts[faultproxy.CountKey{Container: "Operations", Kind: faultproxy.KindDelete, Status: 0}]
	require.Positive(t, dropped)
	require.Equal(t, map[faultproxy.CountKey]int64{
		{Container: "Operations", Kind: faultproxy.KindCreate, Status: http.StatusCreated}:             1,
		{Container: "Operations", Kind: faultproxy.KindRead, Status: http.StatusOK}:                    2,
		{Container: "Operations", Kind: faultproxy.KindQuery, Status: http.StatusOK}:                   1,
		{Container: "Operations", Kind: faultproxy.KindReplace, Status: http.StatusOK}:                 1,
		{Container: "Operations", Kind: faultproxy.KindReplace, Status: http.StatusPreconditionFailed}: 1,
		{Container: "Locks", Kind: faultproxy.KindUpsert, Status: http.StatusCreated}:                  1,
		{Container: "Locks", Kind: faultproxy.KindCreate, Status: http.StatusConflict}:                 1,
		{Container: "Locks", Kind: faultproxy.KindDelete, Status: http.StatusNoContent}:                1,
		// The first try and MaxRetries (2) more.
		{Container: "Operations", Kind: faultproxy.KindRead, Status: http.StatusTooManyRequests}: 3,
		{Container: "Operations", Kind: faultproxy.KindDelete, Status: 0}:                        dropped,
	}, counts)
	// Counts do not touch the other records.
	require.Len(t, p.Writes(), 4)
}
