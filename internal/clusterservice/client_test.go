package clusterservice

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/entra"
	"github.com/opstatus/opstatus/internal/testenv"
)

// Replies as Cluster Service sends them.
const (
	clusterStatusJSON  = `{"kind":"ClusterStatus","id":"x","state":"error","description":"d","provision_error_code":"OCM3001","provision_error_message":"m"}`
	nodePoolStatusJSON = `{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","value":"ready"},"message":"m"}`
	notFoundJSON       = `{"kind":"Error","id":"404","href":"/api/clusters_mgmt/v1/errors/404","code":"CLUSTERS-MGMT-404","reason":"Cluster 'x' not found"}`
)

var (
	cmCluster  = mustParse("/api/clusters_mgmt/v1/clusters/2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p")
	hcpCluster = mustParse("/api/aro_hcp/v1alpha1/clusters/abc123")
	hcpPool    = mustParse("/api/aro_hcp/v1alpha1/clusters/abc123/node_pools/np-1")
)

func mustParse(s string) InternalID {
	id, err := ParseInternalID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// recorder is a fake Cluster Service that records what it is asked.
type recorder struct {
	mu       sync.Mutex
	requests []*http.Request
	reply    http.HandlerFunc
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests = append(r.requests, req.Clone(context.Background()))
	r.mu.Unlock()
	r.reply(w, req)
}

func (r *recorder) seen() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.requests...)
}

func replyJSON(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// statusReplies answers each status path with its JSON.
func statusReplies() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case cmCluster.Path + "/status", hcpCluster.Path + "/status":
			replyJSON(http.StatusOK, clusterStatusJSON)(w, r)
		case hcpPool.Path + "/status":
			replyJSON(http.StatusOK, nodePoolStatusJSON)(w, r)
		default:
			replyJSON(http.StatusNotFound, notFoundJSON)(w, r)
		}
	}
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func debugLogger(buf *testenv.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestStatusPathsAndBodies(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		for _, tc := range []struct {
			id   InternalID
			want Status
		}{
			{cmCluster, Status{State: "error", ErrorCode: "OCM3001", ErrorMessage: "m", Description: "d"}},
			{hcpCluster, Status{State: "error", ErrorCode: "OCM3001", ErrorMessage: "m", Description: "d"}},
			{hcpPool, Status{State: "ready", ErrorMessage: "m"}},
		} {
			t.Run(fmt.Sprintf("tls=%v%s", useTLS, tc.id.Path), func(t *testing.T) {
				rec := &recorder{reply: statusReplies()}
				var srv *httptest.Server
				if useTLS {
					srv = httptest.NewTLSServer(rec)
				} else {
					srv = httptest.NewServer(rec)
				}
				defer srv.Close()
				c := newClient(t, Config{URL: srv.URL, InsecureSkipVerify: useTLS})

				got, err := c.Status(context.Background(), tc.id)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)

				seen := rec.seen()
				require.Len(t, seen, 1)
				require.Equal(t, http.MethodGet, seen[0].Method)
				require.Equal(t, tc.id.Path+"/status", seen[0].URL.Path)
				require.Empty(t, seen[0].URL.RawQuery)
				require.Equal(t, UserAgent, seen[0].Header.Get("User-Agent"))
				require.Empty(t, seen[0].Header.Get("Authorization"), "unauthenticated without credentials")
			})
		}
	}
}

func TestStatusBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   InternalID
		body string
		want Status
		err  string
	}{
		{name: "cluster with only a state", id: hcpCluster, body: `{"kind":"ClusterStatus","state":"installing"}`,
			want: Status{State: "installing"}},
		{name: "cluster with unknown fields", id: cmCluster,
			body: `{"kind":"ClusterStatus","id":"x","href":"/h","dns_ready":true,"oidc_ready":false,"state":"ready","future":{"a":[1,2]},"limited_support_reason_count":0}`,
			want: Status{State: "ready"}},
		{name: "cluster state kept as sent", id: cmCluster, body: `{"state":"Hibernating"}`,
			want: Status{State: "Hibernating"}},
		{name: "node pool error", id: hcpPool,
			body: `{"kind":"NodePoolStatus","id":"np","current_replicas":2,"state":{"kind":"NodePoolState","value":"recoverable_error","last_updated_timestamp":"2025-01-02T03:04:05Z"},"message":"scale failed"}`,
			want: Status{State: "recoverable_error", ErrorMessage: "scale failed"}},
		{name: "cluster without state", id: cmCluster, body: `{"kind":"ClusterStatus","id":"x"}`, err: "no state"},
		{name: "node pool without state", id: hcpPool, body: `{"kind":"NodePoolStatus","id":"np"}`, err: "no state.value"},
		// The NodePoolState field is "value" on the wire (@json(name="value")
		// in the API model); node_pool_state_value is only the Go name.
		{name: "node pool with the Go field name", id: hcpPool,
			body: `{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","node_pool_state_value":"ready"},"message":"m"}`,
			err:  "no state.value"},
		{name: "empty object", id: hcpCluster, body: `{}`, err: "no state"},
		{name: "null", id: hcpCluster, body: `null`, err: "no state"},
		{name: "empty body", id: hcpCluster, body: ``, err: "no state"},
		{name: "not JSON", id: hcpCluster, body: `<html>oops</html>`, err: ""},
		{name: "array", id: hcpCluster, body: `[1,2]`, err: ""},
		{name: "truncated JSON", id: hcpCluster, body: `{"state":"rea`, err: ""},
		{name: "wrong type", id: hcpCluster, body: `{"state":42}`, err: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(http.StatusOK, tc.body))
			defer srv.Close()
			c := newClient(t, Config{URL: srv.URL})
			got, err := c.Status(context.Background(), tc.id)
			if tc.want != (Status{}) {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.err)
			require.False(t, IsTransient(err), "a malformed reply is not transient: %v", err)
			require.NotErrorIs(t, err, ErrNotFound)
			require.Equal(t, Status{}, got)
		})
	}
}

func TestStatusHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reply     http.HandlerFunc
		notFound  bool
		transient bool
	}{
		{name: "404 JSON", reply: replyJSON(404, notFoundJSON), notFound: true},
		// Not OCM errors: they say nothing about the cluster (TestStatusNotFound).
		{name: "404 empty", reply: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(404) }},
		{name: "404 text", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, "404 page not found")
		}},
		{name: "500", reply: replyJSON(500, `{"kind":"Error","id":"500","code":"CLUSTERS-MGMT-500","reason":"boom"}`), transient: true},
		{name: "502 html", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		}, transient: true},
		{name: "503", reply: replyJSON(503, `{"kind":"Error","reason":"unavailable"}`), transient: true},
		{name: "429", reply: replyJSON(429, `{"kind":"Error","reason":"slow down"}`), transient: true},
		{name: "400", reply: replyJSON(400, `{"kind":"Error","reason":"bad"}`)},
		{name: "401", reply: replyJSON(401, `{"kind":"Error","reason":"who"}`)},
		{name: "403", reply: replyJSON(403, `{"kind":"Error","reason":"no"}`)},
		{name: "409", reply: replyJSON(409, `{"kind":"Error","reason":"conflict"}`)},
		{name: "non-JSON 200", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ready")
		}},
		{name: "connection closed without a reply", reply: func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, transient: true},
		{name: "connection closed in the middle of the body", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, `{"kind":"ClusterStatus","description":"`)
		}, transient: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.reply)
			defer srv.Close()
			c := newClient(t, Config{URL: srv.URL})
			_, err := c.Status(context.Background(), hcpCluster)
			require.Error(t, err)
			require.Equal(t, tc.notFound, errors.Is(err, ErrNotFound), "ErrNotFound: %v", err)
			require.Equal(t, tc.transient, IsTransient(err), "IsTransient: %v", err)
		})
	}
}

// reply404 answers 404 with body and, unless it is "-", contentType; "-"
// sends no Content-Type at all.
func reply404(contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		testenv.WriteNotFound(w, contentType, body)
	}
}

// TestStatusNotFound: only an OCM error body makes a 404 mean that the
// resource does not exist; any other 404 is a non-transient error that says
// what came back.
func TestStatusNotFound(t *testing.T) {
	const nginx = `<html>
<head><title>404 Not Found</title></head>
<body>
<center><h1>404 Not Found</h1></center>
<hr><center>nginx</center>
</body>
</html>
`
	for _, tc := range []struct {
		name  string
		reply http.HandlerFunc
		err   string // empty: ErrNotFound
	}{
		{name: "OCM error", reply: reply404("application/json", notFoundJSON)},
		{name: "OCM error with charset", reply: reply404("application/json; charset=utf-8", notFoundJSON)},
		{name: "OCM error without content type", reply: reply404("-", notFoundJSON)},
		{name: "minimal OCM error", reply: reply404("application/json", `{"kind":"Error"}`+"\n")},
		{name: "router text", reply: http.NotFound,
			err: `HTTP 404 Not Found: not an OCM error (content type "text/plain; charset=utf-8", body "404 page not found\n")`},
		{name: "ingress HTML", reply: reply404("text/html", nginx+strings.Repeat("<!-- padding -->\n", 1000)),
			err: `not an OCM error (content type "text/html", body "<html>\n<head><title>404 Not Found</title></head>\n<body>\n<center>…")`},
		{name: "OCM error body as text", reply: reply404("text/plain", notFoundJSON), err: `not an OCM error (content type "text/plain", body "{\"kind\":\"Error\"`},
		{name: "JSON without kind", reply: reply404("application/json", `{"message":"not found"}`),
			err: `not an OCM error (content type "application/json", no "kind":"Error", body "{\"message\":\"not found\"}")`},
		{name: "JSON of another kind", reply: reply404("application/json", `{"kind":"ClusterStatus","state":"ready"}`), err: `no "kind":"Error"`},
		{name: "JSON kind in another case", reply: reply404("application/json", `{"Kind":"Error"}`), err: `no "kind":"Error"`},
		{name: "JSON kind not a string", reply: reply404("application/json", `{"kind":["Error"]}`), err: `no "kind":"Error"`},
		{name: "JSON array", reply: reply404("application/json", `[{"kind":"Error"}]`), err: "not a JSON object"},
		{name: "JSON null", reply: reply404("application/json", `null`), err: "not a JSON object"},
		{name: "truncated JSON", reply: reply404("application/json", `{"kind":"Error"`), err: "not a JSON object"},
		{name: "JSON then more", reply: reply404("application/json", `{"kind":"Error"} <html>`), err: "not a JSON object"},
		{name: "HTML labelled JSON", reply: reply404("application/json", nginx), err: `content type "application/json", not a JSON object, body "<html>`},
		{name: "problem JSON", reply: reply404("application/problem+json", `{"kind":"Error","title":"Not Found"}`), err: `content type "application/problem+json"`},
		{name: "empty body", reply: reply404("-", ""), err: `HTTP 404 Not Found: not an OCM error (no content type, empty body)`},
		{name: "empty JSON body", reply: reply404("application/json", ""), err: `not an OCM error (content type "application/json", empty body)`},
	} {
		for _, id := range []InternalID{cmCluster, hcpCluster, hcpPool} {
			t.Run(tc.name+id.Path, func(t *testing.T) {
				rec := &recorder{reply: tc.reply}
				srv := httptest.NewServer(rec)
				defer srv.Close()
				_, err := newClient(t, Config{URL: srv.URL}).Status(context.Background(), id)
				require.Error(t, err)
				require.Len(t, rec.seen(), 1)
				require.False(t, IsTransient(err), "a 404 is not transient: %v", err)
				if tc.err == "" {
					require.ErrorIs(t, err, ErrNotFound)
					return
				}
				require.NotErrorIs(t, err, ErrNotFound)
				require.Contains(t, err.Error(), "GET "+id.Path+"/status: HTTP 404 Not Found: not an OCM error (")
				require.Contains(t, err.Error(), tc.err)
				require.Less(t, len(err.Error()), 400, "bounded: %s", err)
			})
		}
	}
}

// TestStatusNotFoundBody: a 404 whose body cannot be read whole is neither
// not-found nor a permanent error.
func TestStatusNotFoundBody(t *testing.T) {
	t.Run("connection closed in the middle of the body", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Error",`)
		}))
		defer srv.Close()
		_, err := newClient(t, Config{URL: srv.URL}).Status(context.Background(), hcpCluster)
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNotFound)
		require.True(t, IsTransient(err), "%v", err)
	})
	t.Run("larger than the limit", func(t *testing.T) {
		body := `{"kind":"Error","reason":"` + strings.Repeat("x", 2000) + `"}`
		srv := httptest.NewServer(reply404("application/json", body))
		defer srv.Close()
		_, err := newClient(t, Config{URL: srv.URL, MaxReplyBytes: 1000}).Status(context.Background(), hcpCluster)
		require.ErrorIs(t, err, ErrReplyTooLarge)
		require.NotErrorIs(t, err, ErrNotFound)
		require.False(t, IsTransient(err))
	})
}

func TestStatusTimeoutIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, Config{URL: srv.URL, Timeout: 100 * time.Millisecond})
	_, err := c.Status(context.Background(), hcpCluster)
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, IsTransient(err))
}

func TestStatusCanceledIsTransient(t *testing.T) {
	srv := httptest.NewServer(statusReplies())
	defer srv.Close()
	c := newClient(t, Config{URL: srv.URL})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Status(ctx, hcpCluster)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, IsTransient(err))
}

func TestStatusConnectionRefusedIsTransient(t *testing.T) {
	port, err := testenv.FreePort()
	require.NoError(t, err)
	c := newClient(t, Config{URL: "http://127.0.0.1:" + strconv.Itoa(port)})
	_, err = c.Status(context.Background(), hcpCluster)
	require.Error(t, err)
	require.True(t, IsTransient(err), "%v", err)
}

// A name that does not resolve is a DNS failure like a private DNS zone's
// outage, which answers NXDOMAIN for an internal name: transient, as every
// DNS failure is (see IsTransient). ".invalid" never resolves (RFC 6761);
// a machine without DNS fails otherwise, with a DNS error all the same.
func TestStatusDNSFailureIsTransient(t *testing.T) {
	c := newClient(t, Config{URL: "https://cluster-service.invalid", Timeout: 5 * time.Second})
	_, err := c.Status(context.Background(), hcpCluster)
	var dns *net.DNSError
	require.ErrorAs(t, err, &dns)
	require.True(t, IsTransient(err), "%v", err)
}

// A redirect is refused, whether to another host or to another path of the
// same host: each call (Status, InflightChecks) expects its own path only.
func TestRedirectsAreNotFollowed(t *testing.T) {
	replies := func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/inflight_checks") {
			inflightReplies()(w, r)
			return
		}
		statusReplies()(w, r)
	}
	evil := &recorder{reply: replies}
	evilSrv := httptest.NewServer(evil)
	defer evilSrv.Close()
	for _, call := range []struct {
		path string
		do   func(*Client) error
	}{
		{hcpCluster.Path + "/status", func(c *Client) error {
			_, err := c.Status(context.Background(), hcpCluster)
			return err
		}},
		{hcpCluster.Path + "/inflight_checks", func(c *Client) error {
			_, err := c.InflightChecks(context.Background(), hcpCluster)
			return err
		}},
	} {
		for _, target := range []string{
			evilSrv.URL + call.path,    // another host
			cmCluster.Path + "/status", // same host, another path
			hcpCluster.Path + "/status",
		} {
			if target == call.path {
				continue
			}
			t.Run(call.path+" to "+target, func(t *testing.T) {
				rec := &recorder{reply: func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == call.path {
						http.Redirect(w, r, target, http.StatusFound)
						return
					}
					replies(w, r)
				}}
				srv := httptest.NewServer(rec)
				defer srv.Close()
				err := call.do(newClient(t, Config{URL: srv.URL}))
				require.ErrorIs(t, err, errRefused)
				require.False(t, IsTransient(err))
				require.Len(t, rec.seen(), 1)
				require.Empty(t, evil.seen())
			})
		}
	}
}

func TestStatusRefusesForgedIDs(t *testing.T) {
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClient(t, Config{URL: srv.URL})
	for _, id := range []InternalID{
		{},
		{Path: hcpCluster.Path, Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: "../../accounts_mgmt"},
		{Path: hcpCluster.Path, Kind: KindNodePool, API: APIAroHCPV1alpha1, ClusterID: "abc123", NodePoolID: "np"},
		{Path: "/api/aro_hcp/v1alpha1/clusters/%2e%2e", Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: "%2e%2e"},
		{Path: cmCluster.Path, Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: cmCluster.ClusterID},
	} {
		_, err := c.Status(context.Background(), id)
		require.ErrorIs(t, err, errInvalidInternalID, "%+v", id)
		require.False(t, IsTransient(err))
	}
	require.Empty(t, rec.seen())
}

// streamServer replies with a 50 MiB JSON document and reports how much it
// managed to write and whether the client hung up.
func streamServer(t *testing.T, declareLength bool) (*httptest.Server, *atomic.Int64, chan error) {
	const total = 50 << 20
	written := &atomic.Int64{}
	done := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		prefix := `{"kind":"ClusterStatus","state":"ready","description":"`
		w.Header().Set("Content-Type", "application/json")
		if declareLength {
			w.Header().Set("Content-Length", strconv.Itoa(len(prefix)+total+2))
		}
		w.WriteHeader(http.StatusOK)
		_, err := io.WriteString(w, prefix)
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for err == nil && written.Load() < total {
			var n int
			n, err = w.Write(chunk)
			written.Add(int64(n))
			w.(http.Flusher).Flush()
		}
		if err == nil {
			_, err = io.WriteString(w, `"}`)
		}
		done <- err
	}))
	t.Cleanup(srv.Close)
	return srv, written, done
}

func TestReplyLargerThanLimit(t *testing.T) {
	for _, declare := range []bool{false, true} {
		t.Run(fmt.Sprintf("contentLength=%v", declare), func(t *testing.T) {
			srv, written, done := streamServer(t, declare)
			c := newClient(t, Config{URL: srv.URL})
			_, err := c.Status(context.Background(), hcpCluster)
			require.ErrorIs(t, err, ErrReplyTooLarge)
			require.False(t, IsTransient(err))

			var serverErr error
			select {
			case serverErr = <-done:
			case <-time.After(time.Minute): // a bound against hanging, not a timing assertion
				t.Fatal("the server is still writing: the client did not close the connection")
			}
			require.Error(t, serverErr, "the server must see the connection closed early")
			t.Logf("server wrote %d bytes of 50 MiB before the client hung up: %v", written.Load(), serverErr)
			require.Less(t, written.Load(), int64(25<<20))
		})
	}
}

func TestReplyWithinLimit(t *testing.T) {
	body := `{"kind":"ClusterStatus","state":"ready","description":"` + strings.Repeat("x", 2000) + `"}`
	srv := httptest.NewServer(replyJSON(http.StatusOK, body))
	defer srv.Close()

	c := newClient(t, Config{URL: srv.URL, MaxReplyBytes: int64(len(body))})
	st, err := c.Status(context.Background(), hcpCluster)
	require.NoError(t, err)
	require.Equal(t, "ready", st.State)

	small := newClient(t, Config{URL: srv.URL, MaxReplyBytes: int64(len(body) - 1)})
	_, err = small.Status(context.Background(), hcpCluster)
	require.ErrorIs(t, err, ErrReplyTooLarge)
}

func TestTLSVerification(t *testing.T) {
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewUnstartedServer(rec)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()

	strict := newClient(t, Config{URL: srv.URL})
	_, err := strict.Status(context.Background(), hcpCluster)
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate")
	require.False(t, IsTransient(err))
	require.Empty(t, rec.seen(), "no request goes over an unverified connection")

	insecure := newClient(t, Config{URL: srv.URL, InsecureSkipVerify: true})
	st, err := insecure.Status(context.Background(), hcpCluster)
	require.NoError(t, err)
	require.Equal(t, "error", st.State)
}

// makeJWT returns a JWT access token like the ones identity providers issue,
// with an expiry claim; nobody checks its signature here.
func makeJWT(subject string) string {
	enc := base64.RawURLEncoding
	now := time.Now().Unix()
	header := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims := enc.EncodeToString([]byte(fmt.Sprintf(`{"typ":"Bearer","sub":%q,"iat":%d,"exp":%d}`, subject, now, now+3600)))
	return header + "." + claims + "." + enc.EncodeToString([]byte("signature-not-checked"))
}

type tokenServer struct {
	*httptest.Server
	token    string
	requests atomic.Int32
	problems chan string
}

func newTokenServer(t *testing.T, clientID, secret string) *tokenServer {
	ts := &tokenServer{token: makeJWT("opstatus-test"), problems: make(chan string, 10)}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.requests.Add(1)
		id, pw, ok := r.BasicAuth()
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/oauth2/token":
			ts.problems <- fmt.Sprintf("unexpected %s %s", r.Method, r.URL.Path)
		case r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials":
			ts.problems <- fmt.Sprintf("unexpected form %v", r.PostForm)
		case !ok || id != clientID || pw != secret:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"bad client credentials"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, ts.token)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestOAuthClientCredentials(t *testing.T) {
	const clientID, secret = "opstatus-client", "s3cr3t-Value-never-logged"
	ts := newTokenServer(t, clientID, secret)
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()

	logs := &testenv.SyncBuffer{}
	c := newClient(t, Config{
		URL: srv.URL, ClientID: clientID, ClientSecret: secret, TokenURL: ts.URL + "/oauth2/token",
		Logger: debugLogger(logs),
	})
	for _, id := range []InternalID{cmCluster, hcpCluster, hcpPool} {
		_, err := c.Status(context.Background(), id)
		require.NoError(t, err)
	}
	require.Empty(t, drain(ts.problems))
	require.Equal(t, int32(1), ts.requests.Load(), "the token is reused while valid")
	seen := rec.seen()
	require.Len(t, seen, 3)
	for _, r := range seen {
		require.Equal(t, "Bearer "+ts.token, r.Header.Get("Authorization"))
	}

	out := logs.String()
	require.NotEmpty(t, out, "the client logs at debug level")
	requireNoSecrets(t, out, secret, ts.token, clientID)
}

func TestOAuthBadCredentials(t *testing.T) {
	const clientID, secret = "opstatus-client", "s3cr3t-Value-never-logged"
	ts := newTokenServer(t, clientID, "another-secret")
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()

	logs := &testenv.SyncBuffer{}
	c := newClient(t, Config{
		URL: srv.URL, ClientID: clientID, ClientSecret: secret, TokenURL: ts.URL + "/oauth2/token",
		Logger: debugLogger(logs),
	})
	_, err := c.Status(context.Background(), hcpCluster)
	require.Error(t, err)
	require.Contains(t, err.Error(), "token endpoint")
	require.Contains(t, err.Error(), "401")
	require.False(t, IsTransient(err))
	require.Empty(t, rec.seen(), "no status request without a token")
	requireNoSecrets(t, err.Error()+logs.String(), secret, ts.token, clientID)
}

func requireNoSecrets(t *testing.T, text, secret, token, clientID string) {
	t.Helper()
	require.NotContains(t, text, secret)
	require.NotContains(t, text, token)
	require.NotContains(t, text, base64.StdEncoding.EncodeToString([]byte(clientID+":"+secret)))
	require.NotContains(t, text, "Bearer")
	require.NotContains(t, text, "Authorization")
}

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}

// TestConnectionReuse runs two rounds of 32 concurrent polls: the second
// round reuses the first round's connections instead of dialing new ones
// (with net/http's default of 2 idle connections per host it would dial ~30).
func TestConnectionReuse(t *testing.T) {
	const concurrent = 32
	srv := testenv.NewRoundServer(concurrent, statusReplies())
	defer srv.Close()

	c := newClient(t, Config{URL: srv.URL})
	for round := 1; round <= 2; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for range concurrent {
			wg.Go(func() {
				_, err := c.Status(context.Background(), hcpCluster)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		if round == 1 {
			require.Equal(t, int32(concurrent), srv.Dials())
		}
	}
	t.Logf("connections opened for %d requests: %d", 2*concurrent, srv.Dials())
	require.LessOrEqual(t, srv.Dials(), int32(concurrent+concurrent/4))
}

func TestNewClientConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // empty: accepted
		hide string // must not appear in the error
	}{
		{name: "https", cfg: Config{URL: "https://api.example.internal"}},
		{name: "https with slash", cfg: Config{URL: "https://api.example.internal/"}},
		{name: "http with port", cfg: Config{URL: "http://127.0.0.1:8000"}},
		{name: "credentials", cfg: Config{URL: "https://api.example.internal", ClientID: "id", ClientSecret: "pw",
			TokenURL: "https://login.example.internal/realms/x/protocol/openid-connect/token"}},
		{name: "empty URL", cfg: Config{}, err: "URL is required"},
		{name: "relative", cfg: Config{URL: "api.example.internal"}, err: "absolute http or https"},
		{name: "host:port", cfg: Config{URL: "localhost:8000"}, err: "absolute http or https"},
		{name: "ftp", cfg: Config{URL: "ftp://api.example.internal"}, err: "absolute http or https"},
		{name: "unix", cfg: Config{URL: "unix://api.example.internal/tmp/sock"}, err: "absolute http or https"},
		{name: "no host", cfg: Config{URL: "https://"}, err: "no host"},
		{name: "path", cfg: Config{URL: "https://api.example.internal/api"}, err: "must not have a path"},
		{name: "query", cfg: Config{URL: "https://api.example.internal?protocol=h2c"}, err: "query"},
		{name: "fragment", cfg: Config{URL: "https://api.example.internal#x"}, err: "fragment"},
		{name: "user info", cfg: Config{URL: "https://user:hunter2@api.example.internal"}, err: "user information", hide: "hunter2"},
		{name: "unparsable with password", cfg: Config{URL: "https://user:hunter2@api.example.internal:port"}, err: "not a valid URL", hide: "hunter2"},
		{name: "ipv6", cfg: Config{URL: "http://[::1]:8000"}},
		{name: "only secret", cfg: Config{URL: "https://a.example", ClientSecret: "hunter2"},
			err: "missing: ClientID, TokenURL", hide: "hunter2"},
		{name: "no secret", cfg: Config{URL: "https://a.example", ClientID: "id", TokenURL: "https://t.example/token"},
			err: "missing: ClientSecret"},
		{name: "no token URL", cfg: Config{URL: "https://a.example", ClientID: "id", ClientSecret: "hunter2"},
			err: "missing: TokenURL", hide: "hunter2"},
		{name: "bad token URL", cfg: Config{URL: "https://a.example", ClientID: "id", ClientSecret: "hunter2", TokenURL: "t.example/token"},
			err: "TokenURL", hide: "hunter2"},
		{name: "negative timeout", cfg: Config{URL: "https://a.example", Timeout: -time.Second}, err: "Timeout"},
		{name: "negative limit", cfg: Config{URL: "https://a.example", MaxReplyBytes: -1}, err: "MaxReplyBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClient(tc.cfg)
			if tc.err == "" {
				require.NoError(t, err)
				require.NoError(t, c.Close())
				return
			}
			require.Error(t, err)
			require.Nil(t, c)
			require.Contains(t, err.Error(), tc.err)
			if tc.hide != "" {
				require.NotContains(t, err.Error(), tc.hide)
			}
		})
	}
}

// dialFailed is the error of a request whose connection could not be made
// for err, as net/http returns it.
func dialFailed(err error) error {
	return &url.Error{Op: "Get", URL: "https://cs.internal/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
}

func TestIsTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrNotFound, false},
		{fmt.Errorf("x: %w", ErrNotFound), false},
		{ErrReplyTooLarge, false},
		{&httpStatusError{code: 500}, true},
		{&httpStatusError{code: 503}, true},
		{&httpStatusError{code: 429}, true},
		{&httpStatusError{code: 400}, false},
		{&httpStatusError{code: 403}, false},
		{&httpStatusError{code: 404, detail: "not an OCM error (empty body)"}, false},
		// The managed identity's endpoint, as entra reports it.
		{fmt.Errorf("managed identity token: %w", &entra.StatusError{Code: 500}), true},
		{fmt.Errorf("managed identity token: %w", &entra.StatusError{Code: 429}), true},
		{fmt.Errorf("managed identity token: %w", &entra.StatusError{Code: 400}), false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{io.ErrUnexpectedEOF, true},
		{io.EOF, false}, // only an EOF from the transport counts
		{fmt.Errorf("bad JSON"), false},
		// The network's failures, wrapped as net/http wraps them.
		{dialFailed(&net.DNSError{Err: "server misbehaving", Name: "cs.internal", IsTemporary: true}), true},
		{dialFailed(&net.DNSError{Err: "no such host", Name: "cs.internal", IsNotFound: true}), true},
		{dialFailed(&net.DNSError{Err: "i/o timeout", Name: "cs.internal", IsTimeout: true}), true},
		{dialFailed(os.NewSyscallError("connect", syscall.ENETUNREACH)), true},
		{dialFailed(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), true},
		{dialFailed(os.NewSyscallError("connect", syscall.ENETDOWN)), true},
		{dialFailed(os.NewSyscallError("connect", syscall.EHOSTDOWN)), true},
		{dialFailed(os.NewSyscallError("connect", syscall.ETIMEDOUT)), true},
		{dialFailed(os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		// A connection whose peer stopped answering mid-reply: the
		// transport wraps the read's error, which hides its Timeout().
		{&url.Error{Op: "Get", URL: "https://cs.internal/x", Err: fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w",
			&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)})}, true},
		{&url.Error{Op: "Get", URL: "https://cs.internal/x", Err: fmt.Errorf("broken: %w",
			&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})}, true},
		// A certificate not trusted is a setting to fix, not an outage.
		{&url.Error{Op: "Get", URL: "https://cs.internal/x", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, false},
	} {
		t.Run(fmt.Sprint(tc.err), func(t *testing.T) {
			require.Equal(t, tc.want, IsTransient(tc.err), "%v", tc.err)
		})
	}
}

func TestStatusStringsAreBounded(t *testing.T) {
	long := strings.Repeat("é", 100_000)
	st := Status{State: long, ErrorCode: long, ErrorMessage: long, Description: long}.bounded()
	for name, tc := range map[string]struct {
		got string
		max int
	}{
		"state": {st.State, maxStateBytes}, "code": {st.ErrorCode, maxCodeBytes},
		"message": {st.ErrorMessage, maxMessageBytes}, "description": {st.Description, maxMessageBytes},
	} {
		require.LessOrEqual(t, len(tc.got), tc.max+len("…"), name)
		require.True(t, utf8.ValidString(tc.got), name)
		require.True(t, strings.HasSuffix(tc.got, "…"), name)
	}
	short := Status{State: "ready", ErrorCode: "OCM3001", ErrorMessage: "m", Description: "d"}
	require.Equal(t, short, short.bounded())
}

func TestReplyContentType(t *testing.T) {
	const body = `{"kind":"ClusterStatus","state":"ready"}`
	for _, tc := range []struct {
		contentType string
		err         string // empty: accepted
	}{
		{contentType: "application/json"},
		{contentType: "application/json; charset=utf-8"},
		{contentType: "Application/JSON"},
		{contentType: ""},
		{contentType: "text/html", err: `malformed reply: content type "text/html", want application/json`},
		{contentType: "text/plain; charset=utf-8", err: "content type"},
		{contentType: "application/json-seq", err: "content type"},
		{contentType: ";;", err: "content type"},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["Content-Type"] = []string{tc.contentType}
				_, _ = io.WriteString(w, body)
			}))
			defer srv.Close()
			st, err := newClient(t, Config{URL: srv.URL}).Status(context.Background(), hcpCluster)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, "ready", st.State)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.err)
			require.False(t, IsTransient(err))
		})
	}
}
