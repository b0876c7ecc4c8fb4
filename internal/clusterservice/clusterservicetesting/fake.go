// Package clusterservicetesting holds the test double of Cluster Service:
// an HTTP server that answers GET paths from a table, so that tests run
// the real clusterservice.Client against it. Only tests import it.
package clusterservicetesting

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/opstatus/opstatus/internal/clusterservice"
)

// Reply is an HTTP answer of the fake's.
type Reply struct {
	Code int
	Body string
}

// notFound is Cluster Service's own 404, an OCM error.
const notFound = `{"kind":"Error","id":"404","code":"CLUSTERS-MGMT-404","reason":"not found"}`

// Fake is a Cluster Service that answers GET paths from a table, every
// other path with its own 404, and records the paths asked.
type Fake struct {
	mu       sync.Mutex
	replies  map[string]Reply // by path
	requests []string
	endless  string // a credential list path answered without end
}

// New returns a Fake that answers replies, by path.
func New(replies map[string]Reply) *Fake {
	f := &Fake{replies: map[string]Reply{}}
	for path, r := range replies {
		f.replies[path] = r
	}
	return f
}

// Set answers GET path itself (an object, not its status).
func (f *Fake) Set(path string, code int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[path] = Reply{code, body}
}

// SetStatus answers the status of the object at path.
func (f *Fake) SetStatus(path string, code int, body string) { f.Set(path+"/status", code, body) }

// SetInflight answers the inflight checks of the cluster at path.
func (f *Fake) SetInflight(path string, code int, body string) {
	f.Set(path+"/inflight_checks", code, body)
}

// SetCredentials answers the first page of the credential list at path
// with items.
func (f *Fake) SetCredentials(path string, items ...string) {
	f.Set(path, http.StatusOK, fmt.Sprintf(`{"kind":"BreakGlassCredentialList","page":1,"size":%d,"total":%d,"items":[%s]}`,
		len(items), len(items), strings.Join(items, ",")))
}

// Endless answers the credential list at path with full pages whose
// total always promises one more.
func (f *Fake) Endless(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endless = path
}

// Delete makes path Cluster Service's 404 again.
func (f *Fake) Delete(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replies, path)
}

// Calls counts the requests received.
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// Requested counts the requests for path.
func (f *Fake) Requested(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.requests {
		if p == path {
			n++
		}
	}
	return n
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.URL.Path)
	rep, ok := f.replies[r.URL.Path]
	endless := f.endless != "" && r.URL.Path == f.endless
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if endless {
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		items := make([]string, 100)
		for i := range items {
			items[i] = fmt.Sprintf(`{"id":"bgc-%d-%d","status":"revoked"}`, page, i)
		}
		_, _ = fmt.Fprintf(w, `{"kind":"BreakGlassCredentialList","page":%d,"size":100,"total":%d,"items":[%s]}`,
			page, (page+1)*100, strings.Join(items, ","))
		return
	}
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, notFound)
		return
	}
	w.WriteHeader(rep.Code)
	_, _ = io.WriteString(w, rep.Body)
}

// Client serves f for the test and returns a client of it; both close
// when the test ends.
func (f *Fake) Client(t testing.TB) *clusterservice.Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
	if err != nil {
		t.Fatalf("cluster service client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}
