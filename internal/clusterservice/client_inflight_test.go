package clusterservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// inflightChecksJSON is a list as Cluster Service sends it: one check of
// each state, details as free-form JSON.
const inflightChecksJSON = `{"kind":"InflightCheckList","href":"/h","page":1,"size":4,"total":4,"items":[
	{"kind":"InflightCheck","id":"1","href":"/h/1","name":"egress","state":"failed","restarts":0,
	 "started_at":"2026-11-30T12:00:00Z","ended_at":"2026-11-30T12:01:00Z",
	 "details":{"error":"egress to quay.io blocked","urls":["quay.io"]}},
	{"kind":"InflightCheck","id":"2","name":"dns","state":"passed","details":{}},
	{"kind":"InflightCheck","id":"3","name":"network","state":"running"},
	{"kind":"InflightCheck","id":"4","name":"quota","state":"pending","details":null}
]}`

var wantInflightChecks = []InflightCheck{
	{Name: "egress", State: "failed", Error: "egress to quay.io blocked"},
	{Name: "dns", State: "passed"},
	{Name: "network", State: "running"},
	{Name: "quota", State: "pending"},
}

// inflightReplies answers each cluster's inflight_checks path with
// inflightChecksJSON and its status path with its status.
func inflightReplies() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case cmCluster.Path + "/inflight_checks", hcpCluster.Path + "/inflight_checks":
			replyJSON(http.StatusOK, inflightChecksJSON)(w, r)
		default:
			statusReplies()(w, r)
		}
	}
}

func TestInflightChecksPathsAndBodies(t *testing.T) {
	for _, id := range []InternalID{cmCluster, hcpCluster} {
		t.Run(id.Path, func(t *testing.T) {
			rec := &recorder{reply: inflightReplies()}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			c := newClient(t, Config{URL: srv.URL})

			got, err := c.InflightChecks(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, wantInflightChecks, got)

			seen := rec.seen()
			require.Len(t, seen, 1)
			require.Equal(t, http.MethodGet, seen[0].Method)
			require.Equal(t, id.Path+"/inflight_checks", seen[0].URL.Path)
			require.Empty(t, seen[0].URL.RawQuery, "no paging parameters")
			require.Equal(t, UserAgent, seen[0].Header.Get("User-Agent"))

			// A Status call on the same client is its own exchange.
			st, err := c.Status(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, "error", st.State)
			require.Equal(t, id.Path+"/status", rec.seen()[1].URL.Path)
		})
	}
}

func TestInflightChecksBodies(t *testing.T) {
	item := func(details string) string {
		return `{"kind":"InflightCheckList","items":[{"kind":"InflightCheck","name":"egress","state":"failed","details":` + details + `}]}`
	}
	failedWith := func(msg string) []InflightCheck {
		return []InflightCheck{{Name: "egress", State: "failed", Error: msg}}
	}
	for _, tc := range []struct {
		name string
		body string
		want []InflightCheck
		err  string // part of the error; "" for none
	}{
		{name: "empty list", body: `{"kind":"InflightCheckList","page":1,"size":0,"total":0,"items":[]}`, want: []InflightCheck{}},
		{name: "details.error", body: item(`{"error":"blocked"}`), want: failedWith("blocked")},
		{name: "details.error not a string", body: item(`{"error":{"message":"blocked"}}`), want: failedWith("")},
		{name: "details.error a number", body: item(`{"error":42}`), want: failedWith("")},
		{name: "details not an object", body: item(`"blocked"`), want: failedWith("")},
		{name: "details an array", body: item(`[{"error":"blocked"}]`), want: failedWith("")},
		{name: "details.Error in another case", body: item(`{"Error":"blocked"}`), want: failedWith("")},
		{name: "a state kept as sent", body: `{"items":[{"name":"x","state":"Failed"}]}`, want: []InflightCheck{{Name: "x", State: "Failed"}}},
		{name: "no items", body: `{"kind":"InflightCheckList","page":1,"size":0,"total":0}`, err: "malformed reply: no items"},
		{name: "empty object", body: `{}`, err: "malformed reply: no items"},
		{name: "empty body", body: ``, err: "malformed reply: no items"},
		{name: "not JSON", body: `<html>oops</html>`, err: "GET " + hcpCluster.Path + "/inflight_checks"},
		{name: "items not an array", body: `{"items":{"name":"x"}}`, err: "GET " + hcpCluster.Path + "/inflight_checks"},
		{name: "truncated", body: `{"items":[{"name":"x"`, err: "GET " + hcpCluster.Path + "/inflight_checks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(http.StatusOK, tc.body))
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).InflightChecks(context.Background(), hcpCluster)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.err)
			require.False(t, IsTransient(err), "a malformed reply is not transient: %v", err)
			require.Nil(t, got)
		})
	}
}

func TestInflightChecksHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reply     http.HandlerFunc
		notFound  bool
		transient bool
		err       string
	}{
		{name: "OCM 404", reply: replyJSON(404, notFoundJSON), notFound: true},
		{name: "404 text", reply: http.NotFound, err: "HTTP 404 Not Found: not an OCM error (content type"},
		{name: "404 empty", reply: reply404("-", ""), err: "not an OCM error (no content type, empty body)"},
		{name: "500", reply: replyJSON(500, `{"kind":"Error","id":"500","code":"CLUSTERS-MGMT-500","reason":"boom"}`),
			transient: true, err: "HTTP 500 Internal Server Error: CLUSTERS-MGMT-500: boom"},
		{name: "503", reply: replyJSON(503, `{"kind":"Error","reason":"unavailable"}`), transient: true},
		{name: "429", reply: replyJSON(429, `{"kind":"Error","reason":"slow down"}`), transient: true},
		{name: "403", reply: replyJSON(403, `{"kind":"Error","reason":"no"}`), err: "HTTP 403"},
		{name: "HTML 200", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>login</html>")
		}, err: `malformed reply: content type "text/html"`},
		{name: "connection closed without a reply", reply: func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, transient: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{reply: tc.reply}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).InflightChecks(context.Background(), cmCluster)
			require.Error(t, err)
			require.Nil(t, got)
			require.Len(t, rec.seen(), 1)
			require.Equal(t, tc.notFound, errors.Is(err, ErrNotFound), "ErrNotFound: %v", err)
			require.Equal(t, tc.transient, IsTransient(err), "IsTransient: %v", err)
			require.Contains(t, err.Error(), "GET "+cmCluster.Path+"/inflight_checks")
			require.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestInflightChecksTimeoutIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	_, err := newClient(t, Config{URL: srv.URL, Timeout: 100 * time.Millisecond}).InflightChecks(context.Background(), hcpCluster)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, IsTransient(err))
}

func TestInflightChecksReplyLimit(t *testing.T) {
	srv := httptest.NewServer(replyJSON(http.StatusOK, inflightChecksJSON))
	defer srv.Close()
	_, err := newClient(t, Config{URL: srv.URL, MaxReplyBytes: int64(len(inflightChecksJSON))}).InflightChecks(context.Background(), hcpCluster)
	require.NoError(t, err)
	_, err = newClient(t, Config{URL: srv.URL, MaxReplyBytes: int64(len(inflightChecksJSON) - 1)}).InflightChecks(context.Background(), hcpCluster)
	require.ErrorIs(t, err, ErrReplyTooLarge)
	require.False(t, IsTransient(err))
}

// The guard lets an exchange request its one path and nothing else: a
// Status exchange cannot reach inflight_checks, nor the reverse.
func TestGuardOneRequestPerExchange(t *testing.T) {
	rec := &recorder{reply: inflightReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	base, err := parseBaseURL(srv.URL)
	require.NoError(t, err)
	g := &guardTransport{base: base, maxReply: DefaultMaxReplyBytes, next: http.DefaultTransport}
	for _, tc := range []struct {
		expect, request string
		ok              bool
	}{
		{hcpCluster.Path + "/inflight_checks", hcpCluster.Path + "/inflight_checks", true},
		{hcpCluster.Path + "/status", hcpCluster.Path + "/status", true},
		{hcpCluster.Path + "/status", hcpCluster.Path + "/inflight_checks", false},
		{hcpCluster.Path + "/inflight_checks", hcpCluster.Path + "/status", false},
		{hcpCluster.Path + "/inflight_checks", cmCluster.Path + "/inflight_checks", false},
		{hcpCluster.Path + "/inflight_checks", hcpCluster.Path + "/inflight_checks/1", false},
		{hcpCluster.Path + "/inflight_checks", hcpCluster.Path + "/inflight_checks?page=2", false},
	} {
		t.Run(fmt.Sprintf("%s for %s", tc.request, tc.expect), func(t *testing.T) {
			before := len(rec.seen())
			ctx := context.WithValue(context.Background(), exchangeKey{}, &exchange{path: tc.expect})
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "", nil)
			require.NoError(t, err)
			path, query, _ := strings.Cut(tc.request, "?")
			req.URL.Path, req.URL.RawQuery = path, query
			resp, err := g.RoundTrip(req)
			if !tc.ok {
				require.ErrorIs(t, err, errRefused)
				require.Len(t, rec.seen(), before, "nothing is sent")
				return
			}
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Len(t, rec.seen(), before+1)
		})
	}
}

func TestInflightChecksRefusesNodePoolsAndForgedIDs(t *testing.T) {
	rec := &recorder{reply: inflightReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClient(t, Config{URL: srv.URL})
	for _, id := range []InternalID{
		hcpPool,
		{},
		{Path: hcpCluster.Path, Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: "../../accounts_mgmt"},
		{Path: cmCluster.Path, Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: cmCluster.ClusterID},
		{Path: "/api/aro_hcp/v1alpha1/clusters/%2e%2e", Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: "%2e%2e"},
	} {
		_, err := c.InflightChecks(context.Background(), id)
		require.ErrorIs(t, err, errInvalidInternalID, "%+v", id)
		require.False(t, IsTransient(err))
	}
	require.Empty(t, rec.seen())
}

func TestInflightChecksAreBounded(t *testing.T) {
	long := strings.Repeat("é", 10_000)
	var items []string
	for i := range maxInflightChecks + 5 {
		items = append(items, fmt.Sprintf(`{"kind":"InflightCheck","id":"%d","name":%q,"state":%q,"details":{"error":%q}}`, i, long, long, long))
	}
	body := `{"kind":"InflightCheckList","items":[` + strings.Join(items, ",") + `]}`
	srv := httptest.NewServer(replyJSON(http.StatusOK, body))
	defer srv.Close()
	got, err := newClient(t, Config{URL: srv.URL, MaxReplyBytes: int64(len(body))}).InflightChecks(context.Background(), hcpCluster)
	require.NoError(t, err)
	require.Len(t, got, maxInflightChecks)
	for name, tc := range map[string]struct {
		got string
		max int
	}{
		"name": {got[0].Name, maxCodeBytes}, "state": {got[0].State, maxStateBytes}, "error": {got[0].Error, maxMessageBytes},
	} {
		require.LessOrEqual(t, len(tc.got), tc.max+len("…"), name)
		require.True(t, utf8.ValidString(tc.got), name)
		require.True(t, strings.HasSuffix(tc.got, "…"), name)
	}
}
