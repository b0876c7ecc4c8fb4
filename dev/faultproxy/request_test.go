package faultproxy

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRequest(t *testing.T) {
	t.Parallel()
	const docs = "/dbs/db1/colls/Operations/docs"
	tests := []struct {
		name    string
		method  string
		target  string
		headers map[string]string
		body    string
		want    Request
	}{
		{
			name: "account", method: "GET", target: "/",
			want: Request{Kind: KindMeta},
		},
		{
			name: "database", method: "GET", target: "/dbs/db1",
			want: Request{Kind: KindMeta, Database: "db1"},
		},
		{
			name: "container create is meta", method: "POST", target: "/dbs/db1/colls",
			want: Request{Kind: KindMeta, Database: "db1"},
		},
		{
			name: "partition key ranges", method: "GET", target: "/dbs/db1/colls/Operations/pkranges",
			want: Request{Kind: KindMeta, Database: "db1", Container: "Operations"},
		},
		{
			name: "read item", method: "GET", target: docs + "/op1",
			headers: map[string]string{headerPartitionKey: `["sub1"]`},
			want:    Request{Kind: KindRead, Database: "db1", Container: "Operations", ItemID: "op1", PartitionKey: "sub1"},
		},
		{
			name: "read feed", method: "GET", target: docs,
			want: Request{Kind: KindRead, Database: "db1", Container: "Operations"},
		},
		{
			name: "query", method: "POST", target: docs,
			headers: map[string]string{headerIsQuery: "True", headerPartitionKey: `["sub1"]`},
			body:    `{"query":"SELECT * FROM c"}`,
			want:    Request{Kind: KindQuery, IsQuery: true, Database: "db1", Container: "Operations", PartitionKey: "sub1"},
		},
		{
			name: "query by content type", method: "POST", target: docs,
			headers: map[string]string{"Content-Type": "application/query+json"},
			body:    `{"query":"SELECT * FROM c"}`,
			want:    Request{Kind: KindQuery, IsQuery: true, Database: "db1", Container: "Operations"},
		},
		{
			name: "create", method: "POST", target: docs,
			headers: map[string]string{headerPartitionKey: `["sub1"]`},
			body:    `{"id":"op1","partitionKey":"sub1"}`,
			want:    Request{Kind: KindCreate, IsWrite: true, Database: "db1", Container: "Operations", ItemID: "op1", PartitionKey: "sub1"},
		},
		{
			name: "upsert", method: "POST", target: "/dbs/db1/colls/Locks/docs",
			headers: map[string]string{headerIsUpsert: "true", headerPartitionKey: `["sub1"]`},
			body:    `{"id":"sub1","owner":"a"}`,
			want:    Request{Kind: KindUpsert, IsWrite: true, Database: "db1", Container: "Locks", ItemID: "sub1", PartitionKey: "sub1"},
		},
		{
			name: "batch", method: "POST", target: docs,
			headers: map[string]string{headerIsBatch: "true", headerPartitionKey: `["sub1"]`},
			body:    `[{"operationType":"Create"}]`,
			want:    Request{Kind: KindBatch, IsWrite: true, Database: "db1", Container: "Operations", PartitionKey: "sub1"},
		},
		{
			name: "replace", method: "PUT", target: docs + "/op1",
			want: Request{Kind: KindReplace, IsWrite: true, Database: "db1", Container: "Operations", ItemID: "op1"},
		},
		{
			name: "delete", method: "DELETE", target: docs + "/op1",
			want: Request{Kind: KindDelete, IsWrite: true, Database: "db1", Container: "Operations", ItemID: "op1"},
		},
		{
			name: "patch", method: "PATCH", target: docs + "/op1",
			want: Request{Kind: KindPatch, IsWrite: true, Database: "db1", Container: "Operations", ItemID: "op1"},
		},
		{
			name: "escaped id", method: "GET", target: docs + "/a%20b%2Fc",
			want: Request{Kind: KindRead, Database: "db1", Container: "Operations", ItemID: "a b/c"},
		},
		{
			name: "attachments are meta", method: "GET", target: docs + "/op1/attachments",
			want: Request{Kind: KindMeta, Database: "db1", Container: "Operations"},
		},
		{
			name: "hierarchical partition key kept as sent", method: "GET", target: docs + "/op1",
			headers: map[string]string{headerPartitionKey: `["a","b"]`},
			want:    Request{Kind: KindRead, Database: "db1", Container: "Operations", ItemID: "op1", PartitionKey: `["a","b"]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tt.method, tt.target, nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got := parseRequest(r, []byte(tt.body))
			require.Equal(t, r.Header, got.Header)
			require.Equal(t, tt.method, got.Method)
			require.Equal(t, r.URL.Path, got.Path)
			got.Header, got.Method, got.Path = nil, "", ""
			require.Equal(t, tt.want, got)
		})
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	p, err := New("http://127.0.0.1:1", Options{Seed: 7})
	require.NoError(t, err)
	count := func(f Faults) map[fault]int {
		got := map[fault]int{}
		for range 1000 {
			got[p.pick(&f)]++
		}
		return got
	}
	require.Equal(t, map[fault]int{faultNone: 1000}, count(Faults{}))
	require.Equal(t, map[fault]int{fault503: 1000}, count(Faults{Rate503: 1}))
	require.Equal(t, map[fault]int{faultDropAfterForward: 1000}, count(Faults{RateDropAfterForward: 1}))
	// Stacked rates: each kind gets about its share.
	got := count(Faults{Rate429: 0.25, RateTimeout: 0.25, RateDrop: 0.25})
	for _, k := range []fault{faultNone, fault429, faultTimeout, faultDrop} {
		require.InDelta(t, 250, got[k], 60, "%s: %v", k, got)
	}
	require.Zero(t, got[fault503])
}

func TestKeepJSON(t *testing.T) {
	t.Parallel()
	body, truncated := keepJSON([]byte(`{"a":1}`))
	require.JSONEq(t, `{"a":1}`, string(body))
	require.False(t, truncated)
	body, truncated = keepJSON([]byte(`not json`))
	require.Nil(t, body)
	require.False(t, truncated)
	body, truncated = keepJSON(nil)
	require.Nil(t, body)
	require.False(t, truncated)
	body, truncated = keepJSON(make([]byte, maxLoggedBody+1))
	require.Nil(t, body)
	require.True(t, truncated)
}

func TestNewRejectsBadUpstream(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8081", "ftp://127.0.0.1/", "https://"} {
		_, err := New(u, Options{})
		require.Error(t, err, u)
	}
	_, err := New("https://127.0.0.1:8081/", Options{})
	require.NoError(t, err)
}
