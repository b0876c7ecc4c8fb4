package faultproxy_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/internal/testenv"
)

// t0 anchors the synthetic logs; at(s) is s seconds after it.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// lockW is a successful write to the lock of subscription sub, made by owner
// between the instants from and to; ttl < 0 leaves the body without "ttl".
func lockW(kind, owner string, from, to float64, etag, ifMatch string, ttl int) faultproxy.Write {
	body := fmt.Sprintf(`{"id":"sub1","owner":%q}`, owner)
	if ttl >= 0 {
		body = fmt.Sprintf(`{"id":"sub1","owner":%q,"ttl":%d}`, owner, ttl)
	}
	w := faultproxy.Write{
		Start: at(from), End: at(to), Kind: kind, Database: "db", Container: "Locks",
		PartitionKey: "sub1", ItemID: "sub1", Status: http.StatusOK, ETag: etag, IfMatch: ifMatch,
		Owner: owner,
	}
	if kind != faultproxy.KindDelete {
		w.Body = []byte(body)
	} else {
		w.Status = http.StatusNoContent
	}
	return w
}

// dataW is a successful write to an Operations item of subscription SUB1 (the
// check compares subscriptions case-insensitively).
func dataW(id, owner string, from, to float64) faultproxy.Write {
	return faultproxy.Write{
		Start: at(from), End: at(to), Kind: faultproxy.KindReplace, Database: "db", Container: "Operations",
		PartitionKey: "SUB1", ItemID: id, Status: http.StatusOK, Owner: owner,
	}
}

func TestLockViolations(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	type found struct{ ID, Kind, Holder string }
	tests := []struct {
		name   string
		writes []faultproxy.Write
		want   []found
	}{
		{
			name: "acquire, write, release, then the next owner",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				dataW("a-op", "A", 2, 3),
				lockW("delete", "A", 4, 5, "", `"a1"`, -1),
				lockW("create", "B", 6, 7, `"b1"`, "", -1),
				dataW("b-op", "B", 8, 9),
			},
		},
		{
			name: "a write while another owner certainly holds the lock",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				dataW("b-op", "B", 2, 3),
			},
			want: []found{{"b-op", faultproxy.ViolationHeldByOther, "A"}},
		},
		{
			name: "a write straddling the acquisition is not judged held by the other",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 2, `"a1"`, "", -1),
				dataW("b-op", "B", 1, 3),
			},
			// B held nothing at all, which is certain.
			want: []found{{"b-op", faultproxy.ViolationNotHeld, ""}},
		},
		{
			name: "a write after release",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				lockW("delete", "A", 2, 3, "", `"a1"`, -1),
				dataW("a-late", "A", 4, 5),
			},
			want: []found{{"a-late", faultproxy.ViolationNotHeld, ""}},
		},
		{
			name: "a write whose window straddles the release is not reported",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				lockW("delete", "A", 2, 4, "", `"a1"`, -1),
				dataW("a-op", "A", 3, 5),
			},
		},
		{
			name: "expiry: the container default TTL ends the lease",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				dataW("a-in-time", "A", 5, 6),
				dataW("a-late", "A", 12, 13),
			},
			want: []found{{"a-late", faultproxy.ViolationNotHeld, ""}},
		},
		{
			name: "the item's ttl beats the container default",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", 30),
				dataW("a-op", "A", 20, 21),
				dataW("b-op", "B", 25, 26),
			},
			want: []found{{"b-op", faultproxy.ViolationHeldByOther, "A"}},
		},
		{
			name: "renewals extend the lease",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				lockW("upsert", "A", 8, 9, `"a2"`, `"a1"`, -1),
				dataW("a-op", "A", 15, 16),
				dataW("b-op", "B", 15, 16),
			},
			want: []found{{"b-op", faultproxy.ViolationHeldByOther, "A"}},
		},
		{
			name: "a release paired by etag with its lease when windows overlap",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				lockW("create", "B", 9, 13, `"b1"`, "", -1),
				lockW("delete", "A", 10, 11, "", `"a1"`, -1),
				dataW("b-op", "B", 14, 15),
			},
		},
		{
			name: "a takeover ends the previous lease",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				lockW("upsert", "B", 5, 6, `"b1"`, "", -1),
				dataW("b-op", "B", 7, 8),
				dataW("a-op", "A", 7, 8),
			},
			want: []found{{"a-op", faultproxy.ViolationHeldByOther, "B"}},
		},
		{
			name: "unattributed writes and other subscriptions are not judged",
			writes: []faultproxy.Write{
				lockW("create", "A", 0, 1, `"a1"`, "", -1),
				dataW("anon", "", 2, 3),
				func() faultproxy.Write { w := dataW("other-sub", "B", 2, 3); w.PartitionKey = "sub2"; return w }(),
			},
			want: []found{{"other-sub", faultproxy.ViolationNotHeld, ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The order of the log does not matter.
			writes := slices.Clone(tt.writes)
			slices.Reverse(writes)
			var got []found
			for _, v := range faultproxy.LockViolations(writes, ttl, nil) {
				f := found{ID: v.Write.ItemID, Kind: v.Kind}
				require.Equal(t, v.Write.Owner, v.Writer)
				if v.Lease != nil {
					f.Holder = v.Lease.Owner
				}
				got = append(got, f)
			}
			slices.SortFunc(got, func(a, b found) int { return cmpString(a.ID, b.ID) })
			require.Equal(t, tt.want, got)
		})
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestLeases(t *testing.T) {
	t.Parallel()
	leases := faultproxy.Leases([]faultproxy.Write{
		lockW("create", "A", 0, 1, `"a1"`, "", -1),
		lockW("upsert", "A", 8, 9, `"a2"`, `"a1"`, -1),
		lockW("delete", "A", 12, 13, "", `"a2"`, -1),
		lockW("create", "B", 14, 15, `"b1"`, "", -1),
	}, 10*time.Second, nil)
	require.Equal(t, []faultproxy.Lease{
		{Database: "db", Subscription: "sub1", Owner: "A", PossibleFrom: at(0), CertainFrom: at(1), CertainUntil: at(12), PossibleUntil: at(13)},
		{Database: "db", Subscription: "sub1", Owner: "B", PossibleFrom: at(14), CertainFrom: at(15), CertainUntil: at(24), PossibleUntil: at(25)},
	}, leases)
}

// TestLockViolationsThroughProxies runs the lock protocol by hand with two
// writers, each through a proxy of its own, and checks the merged log.
func TestLockViolationsThroughProxies(t *testing.T) {
	t.Parallel()
	cosmos := testenv.SharedCosmos(t)
	db := newDatabase(t, cosmos)
	pa := newProxy(t, cosmos, faultproxy.Options{TLS: true, Name: "A"})
	pb := newProxy(t, cosmos, faultproxy.Options{Name: "B"})
	a := newClient(t, pa, db, clientConfig{owner: "A"})
	b := newClient(t, pb, db, clientConfig{owner: "B"})
	ctx := t.Context()

	acquire := func(c client, owner string) *azcosmos.ItemOptions {
		resp, err := c.locks.CreateItem(ctx, testenv.PK("sub1"), testenv.MustJSON(t, map[string]any{"id": "sub1", "owner": owner}), nil)
		require.NoError(t, err)
		return &azcosmos.ItemOptions{IfMatchEtag: &resp.ETag}
	}
	release := func(c client, held *azcosmos.ItemOptions) {
		_, err := c.locks.DeleteItem(ctx, testenv.PK("sub1"), "sub1", held)
		require.NoError(t, err)
	}
	write := func(c client, id string) {
		_, err := c.ops.UpsertItem(ctx, testenv.PK("sub1"), testenv.MustJSON(t, opItem(id, "sub1")), nil)
		require.NoError(t, err)
	}

	held := acquire(a, "A")
	write(a, "a-op")
	write(b, "b-while-a-holds")
	release(a, held)
	held = acquire(b, "B")
	write(b, "b-op")
	release(b, held)
	write(a, "a-unlocked")

	writes := append(pa.Writes(), pb.Writes()...)
	require.Len(t, writes, 8)
	// Attributed by header and lock body, or by proxy: the same verdicts.
	for name, ownerOf := range map[string]func(faultproxy.Write) string{
		"default": nil,
		"source":  func(w faultproxy.Write) string { return w.Source },
	} {
		violations := faultproxy.LockViolations(writes, lockTTL, ownerOf)
		require.Len(t, violations, 2, name)
		require.Equal(t, "b-while-a-holds", violations[0].Write.ItemID, name)
		require.Equal(t, faultproxy.ViolationHeldByOther, violations[0].Kind, name)
		require.Equal(t, "A", violations[0].Lease.Owner, name)
		require.Equal(t, "a-unlocked", violations[1].Write.ItemID, name)
		require.Equal(t, faultproxy.ViolationNotHeld, violations[1].Kind, name)
	}
}
