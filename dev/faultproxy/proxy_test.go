package faultproxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestPassthrough(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		tls      bool
		upstream func(testing.TB) *testenv.Cosmos
		scheme   string
	}{
		{name: "https to https", tls: true, upstream: testenv.SharedCosmos, scheme: "https://"},
		{name: "http to http", tls: false, upstream: testenv.SharedPlainCosmos, scheme: "http://"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			upstream := tt.upstream(t)
			db := newDatabase(t, upstream)
			p := newProxy(t, upstream, faultproxy.Options{TLS: tt.tls, Name: "p1"})
			require.True(t, strings.HasPrefix(p.URL(), tt.scheme+"127.0.0.1:"), p.URL())
			require.Equal(t, tt.tls, p.Certificate() != nil)
			c := newClient(t, p, db, clientConfig{owner: "tester", contentOnSave: true})
			ctx := t.Context()

			created, err := c.ops.CreateItem(ctx, testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
			require.NoError(t, err)
			require.Equal(t, "Accepted", readItem(t, c.ops, "sub1", "op1")["status"])

			pager := c.ops.NewQueryItemsPager("SELECT * FROM c", testenv.PK("sub1"), nil)
			var found []string
			for pager.More() {
				page, err := pager.NextPage(ctx)
				require.NoError(t, err)
				for _, raw := range page.Items {
					var item map[string]any
					require.NoError(t, json.Unmarshal(raw, &item))
					found = append(found, item["id"].(string))
				}
			}
			require.Equal(t, []string{"op1"}, found)

			replaced := opItem("op1", "sub1")
			replaced["status"] = "Provisioning"
			_, err = c.ops.ReplaceItem(ctx, testenv.PK("sub1"), "op1", testenv.MustJSON(t, replaced),
				&azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
			require.NoError(t, err)
			require.Equal(t, "Provisioning", readItem(t, c.ops, "sub1", "op1")["status"])

			_, err = c.ops.UpsertItem(ctx, testenv.PK("sub1"), testenv.MustJSON(t, opItem("op2", "sub1")), nil)
			require.NoError(t, err)
			patch := azcosmos.PatchOperations{}
			patch.AppendSet("/status", "Succeeded")
			_, err = c.ops.PatchItem(ctx, testenv.PK("sub1"), "op1", patch, nil)
			require.NoError(t, err)
			_, err = c.ops.DeleteItem(ctx, testenv.PK("sub1"), "op1", nil)
			require.NoError(t, err)
			requireMissing(t, c.ops, "sub1", "op1")

			// Failed writes leave no trace in the log.
			_, err = c.ops.CreateItem(ctx, testenv.PK("sub1"), testenv.MustJSON(t, opItem("op2", "sub1")), nil)
			require.Equal(t, http.StatusConflict, testenv.StatusOf(err), "%v", err)
			_, err = c.ops.ReplaceItem(ctx, testenv.PK("sub1"), "op2", testenv.MustJSON(t, opItem("op2", "sub1")),
				&azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
			require.Equal(t, http.StatusPreconditionFailed, testenv.StatusOf(err), "%v", err)
			_, err = c.ops.DeleteItem(ctx, testenv.PK("sub1"), "missing", nil)
			require.Equal(t, http.StatusNotFound, testenv.StatusOf(err), "%v", err)

			writes := p.Writes()
			type entry struct {
				Kind, Container, PartitionKey, ItemID string
				Status                                int
			}
			var got []entry
			for _, w := range writes {
				got = append(got, entry{w.Kind, w.Container, w.PartitionKey, w.ItemID, w.Status})
			}
			require.Equal(t, []entry{
				{"create", "Operations", "sub1", "op1", http.StatusCreated},
				{"replace", "Operations", "sub1", "op1", http.StatusOK},
				{"upsert", "Operations", "sub1", "op2", http.StatusCreated},
				{"patch", "Operations", "sub1", "op1", http.StatusOK},
				{"delete", "Operations", "sub1", "op1", http.StatusNoContent},
			}, got)
			for i, w := range writes {
				require.Equal(t, db, w.Database)
				require.False(t, w.End.Before(w.Start), "write %d ends before it starts", i)
				if i > 0 {
					require.Greater(t, w.Seq, writes[i-1].Seq)
					// The writes were made one after another.
					require.False(t, w.Start.Before(writes[i-1].End), "write %d starts before %d ended", i, i-1)
				}
				require.Equal(t, "tester", w.Owner)
				require.Equal(t, "p1", w.Source)
				require.True(t, strings.HasPrefix(w.UserAgent, "faultproxy-test"), w.UserAgent)
				require.True(t, w.Delivered)
				if w.Kind != faultproxy.KindDelete {
					require.NotEmpty(t, w.ETag, "write %d", i)
				}
			}
			require.JSONEq(t, string(testenv.MustJSON(t, opItem("op1", "sub1"))), string(writes[0].Body))
			require.Equal(t, string(created.ETag), writes[0].ETag)
			var answer map[string]any
			require.NoError(t, json.Unmarshal(writes[0].ResponseBody, &answer))
			require.Equal(t, writes[0].ETag, answer["_etag"])
			require.JSONEq(t, string(testenv.MustJSON(t, replaced)), string(writes[1].Body))
			require.Equal(t, string(created.ETag), writes[1].IfMatch)
			require.Contains(t, string(writes[3].Body), `"Succeeded"`)
			require.Nil(t, writes[4].Body)
			require.Nil(t, writes[4].ResponseBody)

			st := p.Stats()
			require.Equal(t, st.Requests, st.Forwarded)
			require.Zero(t, st.Throttled+st.Unavailable+st.TimedOut+st.Dropped+st.DroppedAfterForward+st.Delayed+st.UpstreamErrors)
			// Keep-alive on both sides: one connection each for the account
			// read and every request after it.
			require.Equal(t, int64(1), c.dials.Load())
			require.Equal(t, int64(1), st.ClientConns)
			require.Equal(t, int64(1), st.UpstreamConns)
		})
	}
}

func TestThrottling(t *testing.T) {
	t.Parallel()
	p, c := setup(t, clientConfig{})
	before := p.Stats()
	p.SetFaults(faultproxy.Faults{Rate429: 1, RetryAfter: 5 * time.Millisecond, Match: onlyItems})

	_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
	require.Equal(t, http.StatusTooManyRequests, testenv.StatusOf(err), "%v", err)
	// azcore retries a 429 itself: the first try and MaxRetries (2) more.
	st := p.Stats()
	require.Equal(t, int64(3), st.Throttled)
	require.Equal(t, before.Forwarded, st.Forwarded)

	p.SetFaults(faultproxy.Faults{})
	requireMissing(t, c.ops, "sub1", "op1")
	require.Empty(t, p.Writes())
}

func TestServiceUnavailable(t *testing.T) {
	t.Parallel()
	p, c := setup(t, clientConfig{})
	before := p.Stats()
	p.SetFaults(faultproxy.Faults{Rate503: 1, Match: onlyItems})

	_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
	require.Equal(t, http.StatusServiceUnavailable, testenv.StatusOf(err), "%v", err)
	_, err = c.ops.ReadItem(t.Context(), testenv.PK("sub1"), "op1", nil)
	require.Equal(t, http.StatusServiceUnavailable, testenv.StatusOf(err), "%v", err)
	st := p.Stats()
	require.GreaterOrEqual(t, st.Unavailable, int64(2))
	require.Equal(t, before.Forwarded, st.Forwarded)

	p.SetFaults(faultproxy.Faults{})
	requireMissing(t, c.ops, "sub1", "op1")
	require.Empty(t, p.Writes())
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	t.Run("held until the client cancels", func(t *testing.T) {
		t.Parallel()
		p, c := setup(t, clientConfig{})
		before := p.Stats()
		p.SetFaults(faultproxy.Faults{RateTimeout: 1, Match: onlyItems}) // Timeout 0: hold forever

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := c.ops.CreateItem(ctx, testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
			done <- err
		}()
		require.Eventually(t, func() bool { return p.Stats().Holding == 1 }, 10*time.Second, 5*time.Millisecond)
		cancel()
		err := <-done
		require.ErrorIs(t, err, context.Canceled)
		// The proxy lets go of the request once the client is gone.
		require.Eventually(t, func() bool { return p.Stats().Holding == 0 }, 10*time.Second, 5*time.Millisecond)
		st := p.Stats()
		require.Equal(t, int64(1), st.TimedOut)
		require.Equal(t, before.Forwarded, st.Forwarded)

		p.SetFaults(faultproxy.Faults{})
		requireMissing(t, c.ops, "sub1", "op1")
		require.Empty(t, p.Writes())
	})
	t.Run("answered 408 after Timeout", func(t *testing.T) {
		t.Parallel()
		p, c := setup(t, clientConfig{})
		before := p.Stats()
		p.SetFaults(faultproxy.Faults{RateTimeout: 1, Timeout: 10 * time.Millisecond, Match: onlyItems})

		_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
		require.Equal(t, http.StatusRequestTimeout, testenv.StatusOf(err), "%v", err)
		st := p.Stats()
		require.Equal(t, int64(1), st.TimedOut)
		require.Equal(t, before.Forwarded, st.Forwarded)

		p.SetFaults(faultproxy.Faults{})
		requireMissing(t, c.ops, "sub1", "op1")
		require.Empty(t, p.Writes())
	})
}

func TestDropBeforeForward(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plainHTTP=%v", plain), func(t *testing.T) {
			t.Parallel()
			p, c := setup(t, clientConfig{plainHTTP: plain})
			before := p.Stats()
			p.SetFaults(faultproxy.Faults{RateDrop: 1, Match: onlyItems})

			_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
			require.Error(t, err)
			require.Zero(t, testenv.StatusOf(err), "a connection error, not an answer: %v", err)
			st := p.Stats()
			// azcosmos does not replay a write whose fate is unknown.
			require.Equal(t, int64(1), st.Dropped)
			require.Equal(t, before.Forwarded, st.Forwarded)

			p.SetFaults(faultproxy.Faults{})
			requireMissing(t, c.ops, "sub1", "op1")
			require.Empty(t, p.Writes())
		})
	}
}

func TestDropAfterForward(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plainHTTP=%v", plain), func(t *testing.T) {
			t.Parallel()
			p, c := setup(t, clientConfig{plainHTTP: plain})
			before := p.Stats()
			p.SetFaults(faultproxy.Faults{RateDropAfterForward: 1, Match: onlyItems})

			_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
			require.Error(t, err)
			require.Zero(t, testenv.StatusOf(err), "a connection error, not an answer: %v", err)
			st := p.Stats()
			require.Equal(t, int64(1), st.DroppedAfterForward)
			require.Equal(t, before.Forwarded+1, st.Forwarded)

			p.SetFaults(faultproxy.Faults{})
			// The write happened although the client was told nothing.
			require.Equal(t, "Accepted", readItem(t, c.ops, "sub1", "op1")["status"])
			writes := p.Writes()
			require.Len(t, writes, 1)
			require.Equal(t, faultproxy.KindCreate, writes[0].Kind)
			require.Equal(t, "op1", writes[0].ItemID)
			require.Equal(t, http.StatusCreated, writes[0].Status)
			require.False(t, writes[0].Delivered)
		})
	}
}

func TestMatchRestrictsFaults(t *testing.T) {
	t.Parallel()
	p, c := setup(t, clientConfig{})
	p.SetFaults(faultproxy.Faults{Rate503: 1, Match: func(r faultproxy.Request) bool { return r.Container == "Locks" }})

	_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
	require.NoError(t, err)
	_, err = c.locks.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, map[string]any{"id": "sub1", "owner": "a"}), nil)
	require.Equal(t, http.StatusServiceUnavailable, testenv.StatusOf(err), "%v", err)

	writes := p.Writes()
	require.Len(t, writes, 1)
	require.Equal(t, "Operations", writes[0].Container)
	require.Positive(t, p.Stats().Unavailable)
	p.SetFaults(faultproxy.Faults{})
	requireMissing(t, c.locks, "sub1", "sub1")
}

func TestDelay(t *testing.T) {
	t.Parallel()
	p, c := setup(t, clientConfig{})
	renewals := func(r faultproxy.Request) bool {
		return r.Container == "Locks" && r.Kind == faultproxy.KindUpsert
	}
	lock := testenv.MustJSON(t, map[string]any{"id": "sub1", "owner": "a"})

	remove := p.Delay(renewals, time.Millisecond)
	_, err := c.locks.UpsertItem(t.Context(), testenv.PK("sub1"), lock, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Stats().Delayed)
	_, err = c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Stats().Delayed, "only renewals are delayed")
	remove()
	_, err = c.locks.UpsertItem(t.Context(), testenv.PK("sub1"), lock, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Stats().Delayed, "the rule is gone")

	// A client that gives up during a delay is never forwarded.
	remove = p.Delay(renewals, time.Hour)
	defer remove()
	before := p.Stats()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.locks.UpsertItem(ctx, testenv.PK("sub1"), lock, nil)
		done <- err
	}()
	require.Eventually(t, func() bool { return p.Stats().Holding == 1 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Eventually(t, func() bool { return p.Stats().Holding == 0 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, before.Forwarded, p.Stats().Forwarded)
	require.Len(t, p.Writes(), 3)
}

func TestCloseDropsHeldRequests(t *testing.T) {
	t.Parallel()
	cosmos := testenv.SharedCosmos(t)
	db := newDatabase(t, cosmos)
	p, err := faultproxy.New(cosmos.Endpoint, faultproxy.Options{TLS: true})
	require.NoError(t, err)
	require.NoError(t, p.Start())
	c := newClient(t, p, db, clientConfig{})
	requireMissing(t, c.ops, "sub1", "warm-up")
	p.SetFaults(faultproxy.Faults{RateTimeout: 1, Match: onlyItems})

	done := make(chan error, 1)
	go func() {
		_, err := c.ops.CreateItem(t.Context(), testenv.PK("sub1"), testenv.MustJSON(t, opItem("op1", "sub1")), nil)
		done <- err
	}()
	require.Eventually(t, func() bool { return p.Stats().Holding == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, p.Close())
	require.Error(t, <-done)
	require.NoError(t, p.Close(), "Close is idempotent")
	require.Error(t, p.Start(), "no restart after Close")
}
