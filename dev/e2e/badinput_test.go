package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The helpers below complement those of handler_test.go for input that
// json.Marshal cannot produce and for checking that nothing was written.

var invocationSeq atomic.Int64

// post sends body as it is to POST /function, as the host would, and returns
// the answer and its raw body. Every log line must carry the invocation id.
func (s *handlerStack) post(function string, body []byte) (response, []byte) {
	s.t.Helper()
	id := fmt.Sprintf("%s-%d", function, invocationSeq.Add(1))
	req, err := http.NewRequest(http.MethodPost, s.url+"/"+function, bytes.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	return s.do(req, id)
}

// do sends req and decodes the custom-handler answer.
func (s *handlerStack) do(req *http.Request, invocationID string) (response, []byte) {
	s.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	require.Equal(s.t, "application/json", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	var r response
	require.NoError(s.t, json.Unmarshal(raw, &r), string(raw))
	r.Status, r.ID = resp.StatusCode, invocationID
	for _, line := range r.Logs {
		require.Contains(s.t, line, invocationID, "every log line carries the invocation id")
	}
	return r, raw
}

// envelope is a poll invocation body as the host sends it, with data as the
// value of Data.
func envelope(data string) []byte {
	return []byte(`{"Data":` + data + `,"Metadata":{"DequeueCount":"1","Id":"\"5f0e9d1c\"","InsertionTime":"\"` +
		time.Now().UTC().Format("2006-01-02T15:04:05+00:00") + `\""}}`)
}

// pollData is the Data of a poll invocation for a message given as text.
func pollData(msg string) string {
	b, _ := json.Marshal(map[string]string{"operation": msg})
	return string(b)
}

// use makes the stack's helpers report to t (a subtest) until the returned
// function restores the test they reported to before.
func (s *handlerStack) use(t *testing.T) func() {
	prev := s.t
	s.t = t
	return func() { s.t = prev }
}

// requireAlive checks that the process still runs and answers GET /.
func (s *handlerStack) requireAlive() {
	s.t.Helper()
	require.Nil(s.t, s.cmd.ProcessState, "handler exited")
	resp, err := http.Get(s.url + "/")
	require.NoError(s.t, err, "handler stopped answering")
	resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
}

// itemRef names one item: an operation or a resource of a subscription.
type itemRef struct {
	resource bool
	sub, id  string
}

func opRef(sub, id string) itemRef  { return itemRef{sub: sub, id: id} }
func resRef(sub, id string) itemRef { return itemRef{resource: true, sub: sub, id: id} }

// snapshot reads items back as the frontend sees them, system fields (_etag,
// _ts) included, so that any write shows as a difference. A missing item
// reads as nil.
func (s *handlerStack) snapshot(refs ...itemRef) map[itemRef]map[string]any {
	s.t.Helper()
	out := map[itemRef]map[string]any{}
	for _, r := range refs {
		read := s.fe.Operation
		if r.resource {
			read = s.fe.Resource
		}
		item, err := read(context.Background(), r.sub, r.id)
		require.NoError(s.t, err)
		out[r] = item
	}
	return out
}

// requireUnchanged checks that the items of before are exactly as they were.
func (s *handlerStack) requireUnchanged(before map[itemRef]map[string]any, msgAndArgs ...any) {
	s.t.Helper()
	refs := make([]itemRef, 0, len(before))
	for r := range before {
		refs = append(refs, r)
	}
	require.Equal(s.t, before, s.snapshot(refs...), msgAndArgs...)
}

// requireNoLockLeft checks that the subscription's lock is free.
func (s *handlerStack) requireNoLockLeft(sub string) {
	s.t.Helper()
	l, ok, err := s.fe.TryLock(context.Background(), sub, "e2e-check")
	require.NoError(s.t, err)
	require.True(s.t, ok, "a lock item was left behind for %s", sub)
	require.NoError(s.t, s.fe.Unlock(context.Background(), l))
}

// csRequests counts the status calls the simulator answered.
func (s *handlerStack) csRequests() int64 {
	var n int64
	for _, c := range s.sim.Stats().Requests {
		n += c
	}
	return n
}

// seedOp writes an operation (Create, Accepted unless given) and its
// resource, with fields as the frontend writes them.
func (s *handlerStack) seedOp(sub, id, internalID, notificationURI string) {
	s.t.Helper()
	ctx := context.Background()
	now := time.Now().UTC() // the handler counts deadlines by its own clock
	key := clusterKey(sub, "c-"+id)
	require.NoError(s.t, s.fe.PutOperation(ctx, frontend.Operation{
		ID: id, PartitionKey: sub, Request: "Create", Status: "Accepted",
		ExternalID: key, InternalID: internalID, StartTime: now, LastTransitionTime: now,
		OperationID:     "/subscriptions/" + sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + id,
		NotificationURI: notificationURI,
	}))
	require.NoError(s.t, s.fe.PutResource(ctx, frontend.Resource{
		ID: "res-" + id, PartitionKey: sub, Key: key, InternalID: internalID,
		ActiveOperationID: id, ProvisioningState: "Accepted",
	}))
}

// outcome decodes a poll's ReturnValue.
// outcome returns the outcome of a message's one operation: poll's
// ReturnValue counts the operations of a message by outcome.
func outcome(t *testing.T, r response) string {
	t.Helper()
	var tally map[string]int
	require.NoError(t, json.Unmarshal(r.ReturnValue, &tally), string(r.ReturnValue))
	require.Len(t, tally, 1, string(r.ReturnValue))
	for o, n := range tally {
		require.Equal(t, 1, n, string(r.ReturnValue))
		return o
	}
	return ""
}

// memory reads a /proc/<pid>/status field in KiB (VmRSS, VmHWM).
func memory(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestBadEnvelopes sends invocation bodies the host never should: each is
// answered with a clear error, the process keeps serving, and the operation
// the message names is neither read from Cluster Service nor written.
func TestBadEnvelopes(t *testing.T) {
	s := startStack(t)
	require.NoError(t, s.sim.AddCluster("cbad", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seedOp(subA, "op-bad", "/api/aro_hcp/v1alpha1/clusters/cbad", "")
	before := s.snapshot(opRef(subA, "op-bad"), resRef(subA, "res-op-bad"))
	msg := fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-bad"}`, subA)
	valid := envelope(pollData(msg))
	deep := strings.Repeat("[", 100_000)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

	for _, tc := range []struct {
		name     string
		function string
		body     []byte
		status   int
		log      string
	}{
		{"empty body", "poll", nil, 400, "request body is empty"},
		{"whitespace body", "poll", []byte(" \r\n\t"), 400, "request body is empty"},
		{"not JSON", "poll", []byte("not json"), 400, "not valid JSON"},
		{"JSON array", "poll", []byte("[" + string(valid) + "]"), 400, "request body is an array"},
		{"JSON string", "poll", []byte(strconv.Quote(string(valid))), 400, "request body is a string"},
		{"JSON null", "poll", []byte("null"), 400, "request body is null"},
		{"Data a string", "poll", envelope(strconv.Quote(msg)), 400, "Data is a string"},
		{"Data an array", "poll", envelope("[" + pollData(msg) + "]"), 400, "Data is an array"},
		{"Data a number", "poll", envelope("42"), 400, "Data is a number"},
		{"Metadata an array", "poll", []byte(`{"Data":` + pollData(msg) + `,"Metadata":[]}`), 400, "Metadata is an array"},
		{"truncated", "poll", valid[:len(valid)/2], 400, "not valid JSON"},
		{"trailing data", "poll", append(slices.Clone(valid), valid...), 400, "not valid JSON"},
		{"unknown binding", "poll", envelope(`{"foo":` + strconv.Quote(msg) + `}`), 400, "binding missing from Data"},
		{"no Data", "poll", []byte(`{"Metadata":{}}`), 400, "binding missing"},
		{"binding null", "poll", envelope(`{"operation":null}`), 400, "want a JSON object"},
		{"binding a number", "poll", envelope(`{"operation":7}`), 400, "want a JSON object"},
		{"binding an array", "poll", envelope(`{"operation":[` + msg + `]}`), 400, "want a JSON object"},
		{"message not JSON", "poll", envelope(pollData("subscriptionId=" + subA)), 400, "neither JSON nor base64"},
		{"message truncated", "poll", envelope(pollData(msg[:len(msg)-2])), 400, "not a valid JSON object"},
		{"oversized body", "poll", envelope(`{"operation":` + strconv.Quote(msg) + `,"pad":"` + strings.Repeat("x", 2<<20) + `"}`), 413, "larger than 1048576 bytes"},
		{"body just over 1 MiB", "poll", []byte(`{"Data":` + pollData(msg) + `,"pad":"` + strings.Repeat("y", 1<<20) + `"}`), 413, "larger than"},
		{"deeply nested body", "poll", []byte(deep), 400, "nests deeper than"},
		{"deeply nested Data", "poll", envelope(`{"operation":` + deep[:50_000] + `}`), 400, "nests deeper than"},
		{"deeply nested message", "poll", envelope(pollData(`{"subscriptionId":` + deep[:100_000] + `}`)), 400, "nests deeper than"},
		{"deeply nested base64 message", "poll", envelope(pollData(b64([]byte(`{"a":` + deep[:1000] + `}`)))), 400, "nests deeper than"},
		{"many layers of quoting", "poll", envelope(`{"operation":` + quoteN(msg, 12) + `}`), 400, "layers of quoting"},
		{"invalid UTF-8 in body", "poll", []byte("{\"Data\":{\"operation\":\"{\\\"subscriptionId\\\":\\\"\xff\xfe\\\"}\"}}"), 400, "not valid UTF-8"},
		{"invalid UTF-8 in a key", "poll", []byte("{\"Da\xc3ta\":{}}"), 400, "not valid UTF-8"},
		{"invalid UTF-8 in base64 message", "poll", envelope(pollData(b64([]byte(`{"subscriptionId":"` + "\xff" + `"}`)))), 400, "not UTF-8"},
		{"scan not JSON", "scan", []byte("{timer}"), 400, "not valid JSON"},
		{"scan deeply nested", "scan", []byte(deep), 400, "nests deeper than"},
		{"scan oversized", "scan", []byte(`{"Data":{"timer":"` + strings.Repeat("z", 3<<20) + `"}}`), 413, "larger than"},
		{"unknown function", "foo", valid, 404, "unknown function"},
		{"function path with dots", "poll/../scan", valid, 404, "unknown function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer s.use(t)()
			s.sim.ResetStats()
			r, _ := s.post(tc.function, tc.body)
			require.Equal(t, tc.status, r.Status, r.Logs)
			level := testenv.HostError // why an invocation failed
			if tc.status == http.StatusNotFound {
				level = testenv.HostWarning // not an invocation
			}
			s.requireLog(t, r, level, tc.log)
			require.Empty(t, r.Outputs, "no output binding on a failed invocation")
			require.Equal(t, "null", string(r.ReturnValue))
			s.requireAlive()
			s.requireUnchanged(before)
			require.Zero(t, s.csRequests(), "no Cluster Service call")
		})
	}

	t.Run("wrong method", func(t *testing.T) {
		defer s.use(t)()
		req, err := http.NewRequest(http.MethodGet, s.url+"/poll", nil)
		require.NoError(t, err)
		r, _ := s.do(req, "")
		require.Equal(t, http.StatusMethodNotAllowed, r.Status)
		s.requireLog(t, r, testenv.HostWarning, "method not allowed")
		s.requireAlive()
	})

	// The same stack acts on a valid message: the cases above were refused
	// for what they are, not because the operation could not be polled.
	r, _ := s.post("poll", valid)
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	require.Equal(t, "updated", outcome(t, r))
	require.Equal(t, "Provisioning", s.opStatus(subA, "op-bad"))
	s.requireNoLockLeft(subA)
}

func quoteN(s string, n int) string {
	for range n {
		s = strconv.Quote(s)
	}
	return s
}

// TestBadIDs sends queue messages whose ids cannot name a Cosmos item, or
// try to reach another one: each is answered 200 "invalid" (a 400 would only
// cycle it into the poison queue) before any read or call, and nothing is
// written. Ids Cosmos DB accepts, however odd, are looked up (here: gone).
// An empty id still makes the message malformed: 400.
func TestBadIDs(t *testing.T) {
	s := startStack(t)
	require.NoError(t, s.sim.AddCluster("cid", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seedOp(subA, "op-id", "/api/aro_hcp/v1alpha1/clusters/cid", "")
	before := s.snapshot(opRef(subA, "op-id"), resRef(subA, "res-op-id"))

	long := strings.Repeat("a", 1024)
	for _, tc := range []struct {
		name, sub, op string
		status        int
		outcome, log  string
	}{
		{"slash in operation id", subA, "x/../op-id", 200, "invalid", "holds '/'"},
		{"slash in subscription id", subA + "/x", "op-id", 200, "invalid", "subscriptionId"},
		{"leading slash", "/" + subA, "op-id", 200, "invalid", "holds '/'"},
		{"backslash", subA, `..\op-id`, 200, "invalid", `holds '\\\\'`},
		{"query", subA, "op-id?x=1", 200, "invalid", "holds '?'"},
		{"fragment", subA, "op-id#x", 200, "invalid", "holds '#'"},
		{"dot dot operation", subA, "..", 200, "invalid", "dot segment"},
		{"dot dot subscription", "..", "op-id", 200, "invalid", "dot segment"},
		{"dot", subA, ".", 200, "invalid", "dot segment"},
		{"1,024-byte operation id", subA, long, 200, "invalid", "1024 bytes long"},
		{"1,024-byte subscription id", long, "op-id", 200, "invalid", "1024 bytes long"},
		{"NUL", subA, "op-id\x00", 200, "gone", "not found"},
		{"newline", subA + "\n", "op-id", 200, "gone", "not found"},
		{"carriage return log forging", subA, "op-id\r\nlevel=INFO msg=forged", 200, "gone", "not found"},
		{"DEL", subA, "op-id\x7f", 200, "gone", "not found"},
		{"C1 control", subA, "op-id\u0085", 200, "gone", "not found"},
		{"tab", subA, "op\tid", 200, "gone", "not found"},
		{"space", subA, "op id", 200, "gone", "not found"},
		{"line separator", subA, "op-id\u2028", 200, "gone", "not found"},
		{"1,023-byte operation id", subA, long[1:], 200, "gone", "not found"},
		{"empty operation id", subA, "", 400, "", "operationId is empty"},
		{"empty subscription id", "", "op-id", 400, "", "subscriptionId is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer s.use(t)()
			s.sim.ResetStats()
			b, err := json.Marshal(map[string]string{"subscriptionId": tc.sub, "operationId": tc.op})
			require.NoError(t, err)
			r, _ := s.post("poll", envelope(pollData(string(b))))
			require.Equal(t, tc.status, r.Status, r.Logs)
			if tc.outcome != "" {
				require.Equal(t, tc.outcome, outcome(t, r))
			}
			s.requireLog(t, r, anyLevel, tc.log)
			for _, line := range r.Logs {
				require.NotContains(t, line, "\n", "ids cannot forge log lines")
				require.NotContains(t, line, "\r", "ids cannot forge log lines")
			}
			s.requireAlive()
			s.requireUnchanged(before)
			require.Zero(t, s.csRequests())
		})
	}

	// Non-UTF-8 ids cannot travel in a JSON string; base64 carries them.
	t.Run("invalid UTF-8 id", func(t *testing.T) {
		defer s.use(t)()
		raw := []byte(`{"subscriptionId":"` + subA + `","operationId":"op-id` + "\xc3\x28" + `"}`)
		r, _ := s.post("poll", envelope(pollData(base64.StdEncoding.EncodeToString(raw))))
		require.Equal(t, http.StatusBadRequest, r.Status, r.Logs)
		s.requireLog(t, r, testenv.HostError, "UTF-8")
		s.requireAlive()
		s.requireUnchanged(before)
	})

	// A quote is a legal id character: it must reach Cosmos as data, never
	// as query syntax. An unknown id is gone; a real one is polled.
	t.Run("quotes are data", func(t *testing.T) {
		defer s.use(t)()
		for _, m := range [][2]string{
			{subA, "op-id' OR '1'='1"},
			{subA, "op-id'--"},
			{subA + "'", "op-id"},
			{subA, `op-id"`},
		} {
			b, _ := json.Marshal(map[string]string{"subscriptionId": m[0], "operationId": m[1]})
			r, _ := s.post("poll", envelope(pollData(string(b))))
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "gone", outcome(t, r), "%q", m)
		}
		s.requireUnchanged(before)

		require.NoError(t, s.sim.AddCluster("cq", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		s.seedOp(subB, "op'q", "/api/aro_hcp/v1alpha1/clusters/cq", "")
		require.Equal(t, "updated", s.pollOp(subB, "op'q"))
		require.Equal(t, "Provisioning", s.opStatus(subB, "op'q"))
	})

	s.requireNoLockLeft(subA)
}

// evilServer counts every request it receives; the handler must never
// reach it.
type evilServer struct {
	*httptest.Server
	hits atomic.Int64
}

func newEvilServer(t *testing.T) *evilServer {
	e := &evilServer{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","state":"ready"}`)
	}))
	t.Cleanup(e.Close)
	return e
}

// TestUnusableInternalIDs writes operations whose internalId is not a known
// Cluster Service path. Each poll answers 200 "invalid", calls no host at all
// (neither Cluster Service nor the host the id points at) and writes nothing.
func TestUnusableInternalIDs(t *testing.T) {
	evil := newEvilServer(t)
	evilHost := strings.TrimPrefix(evil.URL, "http://")
	s := startStack(t)
	require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{}))

	ids := []string{
		"/api/../x",
		"/api/clusters_mgmt/v1/clusters/..",
		"/api/clusters_mgmt/v1/clusters/%2e%2e",
		"/api/clusters_mgmt/v1/clusters/%2e%2e/%2e%2e/%2e%2e/x",
		"/api/clusters_mgmt/v1/clusters/c1/../../../../x",
		"/api/clusters_mgmt/v1/clusters/./c1",
		"https://evil.example/api/clusters_mgmt/v1/clusters/c1",
		"http://" + evilHost + "/api/clusters_mgmt/v1/clusters/c1",
		"//" + evilHost + "/api/clusters_mgmt/v1/clusters/c1",
		"///" + evilHost + "/api/clusters_mgmt/v1/clusters/c1",
		`\\` + evilHost + `\api\clusters_mgmt\v1\clusters\c1`,
		"/\\" + evilHost + "/api/clusters_mgmt/v1/clusters/c1",
		"/api/clusters_mgmt/v1/clusters/c1@" + evilHost,
		"/api/clusters_mgmt/v1/clusters/c1?next=http://" + evilHost,
		"/api/clusters_mgmt/v1/clusters/c1#x",
		"/api/clusters_mgmt/v1/clusters/c1\r\nHost: " + evilHost,
		"/api/clusters_mgmt/v1/clusters/c1\x00",
		"/api/clusters_mgmt/v1/clusters/c\u0131",
		"/api/clusters_mgmt/v1/clusters/c1/",
		"/api/clusters_mgmt/v1/clusters//c1",
		"/api/clusters_mgmt/v1/clusters/" + strings.Repeat("c", 65),
		"/api/clusters_mgmt/v1/clusters",
		"/api/clusters_mgmt/v1/subscriptions/c1",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools",
		"api/clusters_mgmt/v1/clusters/c1",
		"",
	}
	for i, id := range ids {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			defer s.use(t)()
			opID := fmt.Sprintf("op-iid-%d", i)
			s.seedOp(subA, opID, id, s.armURL+"/notify/"+opID)
			before := s.snapshot(opRef(subA, opID), resRef(subA, "res-"+opID))
			s.sim.ResetStats()

			r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, opID))))
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "invalid", outcome(t, r))
			s.requireLog(t, r, testenv.HostError, "operation cannot be polled", "internal_id")
			s.requireAlive()
			s.requireUnchanged(before)
			require.Zero(t, s.csRequests(), "no Cluster Service call")
			require.Zero(t, evil.hits.Load(), "the handler called another host")
		})
	}

	// A Delete is refused the same way: a 404 from the wrong path must not
	// delete anything.
	ctx := context.Background()
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{
		ID: "op-del", PartitionKey: subA, Request: "Delete", Status: "Deleting",
		ExternalID: clusterKey(subA, "cdel"), InternalID: "/api/clusters_mgmt/v1/clusters/../../x",
	}))
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-op-del", PartitionKey: subA,
		Key: clusterKey(subA, "cdel"), ActiveOperationID: "op-del", ProvisioningState: "Deleting"}))
	before := s.snapshot(opRef(subA, "op-del"), resRef(subA, "res-op-del"))
	require.Equal(t, "invalid", s.pollOp(subA, "op-del"))
	s.requireUnchanged(before)

	// scan skips these operations by poll's own rule (it logs each once
	// an hour and counts it); it reads nothing else and calls nobody.
	listed := 0
	for _, m := range s.scan() {
		if m["subscriptionId"] == subA {
			listed++
		}
	}
	require.Zero(t, listed)
	require.Empty(t, s.arm.Bodies(), "no notification for an operation that was never polled")
	require.Zero(t, evil.hits.Load(), "the evil server received requests during the test")
	s.requireNoLockLeft(subA)
}

// badCS is a Cluster Service stand-in that answers each cluster id with a
// broken reply.
type badCS struct {
	redirectTo string       // where cluster "redirect" sends the client
	sent       atomic.Int64 // bytes of huge bodies written
	requests   atomic.Int64
}

const hugeBody = 50 << 20

func (b *badCS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.requests.Add(1)
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/clusters_mgmt/v1/clusters/"), "/status")
	h := w.Header()
	h.Set("Content-Type", "application/json")
	switch id {
	case "ok":
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","state":"installing"}`)
	case "html":
		h.Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
	case "notjson":
		_, _ = io.WriteString(w, "this is not JSON")
	case "empty":
		h.Set("Content-Length", "0")
	case "truncated":
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","state":"rea`)
	case "wrongtype":
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","state":5}`)
	case "array":
		_, _ = io.WriteString(w, `[{"kind":"ClusterStatus","state":"ready"}]`)
	case "nostate":
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus"}`)
	case "redirect":
		http.Redirect(w, r, b.redirectTo, http.StatusFound)
	case "deep":
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","x":`+strings.Repeat("[", 100_000))
	case "huge", "hugechunked", "hugehtml":
		switch id {
		case "huge":
			h.Set("Content-Length", strconv.Itoa(hugeBody))
		case "hugehtml":
			h.Set("Content-Type", "text/html")
		}
		prefix := `{"kind":"ClusterStatus","state":"ready","description":"`
		n, _ := io.WriteString(w, prefix)
		b.sent.Add(int64(n))
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for written := len(prefix); written < hugeBody-2; written += len(chunk) {
			if len(chunk) > hugeBody-2-written {
				chunk = chunk[:hugeBody-2-written]
			}
			n, err := w.Write(chunk)
			b.sent.Add(int64(n))
			if err != nil {
				return // the client hung up, as it should
			}
		}
		n, _ = io.WriteString(w, `"}`)
		b.sent.Add(int64(n))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// TestClusterServiceBadReplies points the handler at a Cluster Service that
// answers garbage: non-JSON, empty, truncated, ill-typed and 50 MiB bodies,
// and a redirect to another host.
// Each poll answers 200 "deferred" with a clear error line, the operation is
// unchanged, the process lives, and a huge reply is not read into memory.
func TestClusterServiceBadReplies(t *testing.T) {
	evil := newEvilServer(t)
	cs := &badCS{redirectTo: evil.URL + "/api/clusters_mgmt/v1/clusters/ok/status"}
	csServer := httptest.NewServer(cs)
	t.Cleanup(csServer.Close)
	s := startStack(t, "CLUSTER_SERVICE_URL="+csServer.URL)
	pid := s.cmd.Process.Pid

	// Warm up with a poll that writes and a scan, then take the baseline.
	s.seedOp(subA, "warm", "/api/clusters_mgmt/v1/clusters/ok", "")
	require.Equal(t, "updated", s.pollOp(subA, "warm"))
	s.scan()
	baseline := memory(t, pid, "VmHWM")

	for _, tc := range []struct {
		id  string
		log string
	}{
		{"html", `content type \"text/html\", want application/json`}, // quotes escaped in the log line
		{"notjson", "ReadObject"},
		{"empty", "malformed reply: no state"},
		{"truncated", "unexpected end of input"},
		{"wrongtype", "ReadString"},
		{"array", "ReadObject"},
		{"nostate", "malformed reply: no state"},
		{"redirect", "redirect 302"},
		{"deep", "exceeded max depth"},
		{"huge", "reply too large"},
		{"hugechunked", "reply too large"},
		{"hugehtml", `content type \"text/html\"`}, // refused unread
	} {
		t.Run(tc.id, func(t *testing.T) {
			defer s.use(t)()
			opID := "op-" + tc.id
			s.seedOp(subA, opID, "/api/clusters_mgmt/v1/clusters/"+tc.id, s.armURL+"/notify/"+opID)
			before := s.snapshot(opRef(subA, opID), resRef(subA, "res-"+opID))
			requests := cs.requests.Load()

			r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, opID))))
			// A dependency failure: the operation stays pending and the next
			// scan retries it; not a reason to poison the message.
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "deferred", outcome(t, r))
			s.requireLog(t, r, testenv.HostError, "operation left unchanged", "GET /api/clusters_mgmt/v1/clusters/"+tc.id+"/status", tc.log)
			for _, line := range s.hostLines(r) {
				require.Less(t, len(line.text), 2048, "a bad reply is summarized, not logged whole")
			}
			require.Equal(t, requests+1, cs.requests.Load(), "one call, no retry")
			s.requireAlive()
			s.requireUnchanged(before)
			s.requireNoLockLeft(subA)
		})
	}

	peak := memory(t, pid, "VmHWM")
	t.Logf("handler peak RSS %d KiB before the bad replies, %d KiB after; %d MiB of huge bodies sent", baseline, peak, cs.sent.Load()>>20)
	require.Less(t, peak-baseline, int64(16<<10), "peak RSS grew by more than 16 MiB: a huge reply was read into memory")
	require.Less(t, cs.sent.Load(), int64(hugeBody), "the huge replies were not read to the end")
	require.Empty(t, s.arm.Bodies())
	require.Zero(t, evil.hits.Load(), "a redirect from Cluster Service was followed")
}

// TestUnusableCosmosItems writes operation items with missing or ill-typed
// fields, as a broken frontend might. poll answers 200 "invalid" for each
// without calling Cluster Service or writing; scan still lists the good
// operations around them.
func TestUnusableCosmosItems(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	const iid = "/api/clusters_mgmt/v1/clusters/c1"
	base := func(id string) map[string]any {
		return map[string]any{
			"id": id, "partitionKey": subA, "request": "Create", "status": "Accepted",
			"externalId": clusterKey(subA, "c1"), "internalId": iid,
			"startTime": "2026-11-30T12:00:00Z", "lastTransitionTime": "2026-11-30T12:00:00Z",
			"notificationUri": s.armURL + "/notify/" + id,
		}
	}
	items := []struct {
		id     string
		change func(m map[string]any)
		log    string
	}{
		{"no-status", func(m map[string]any) { delete(m, "status") }, "unknown status"},
		{"no-request", func(m map[string]any) { delete(m, "request") }, "unknown request"},
		{"no-internalid", func(m map[string]any) { delete(m, "internalId") }, "operation cannot be polled"},
		{"status-number", func(m map[string]any) { m["status"] = 5 }, "unreadable"},
		{"status-null", func(m map[string]any) { m["status"] = nil }, "unknown status"},
		{"status-unknown", func(m map[string]any) { m["status"] = "Running" }, "unknown status"},
		{"status-lowercase", func(m map[string]any) { m["status"] = "accepted" }, "unknown status"},
		{"request-unknown", func(m map[string]any) { m["request"] = "Patch" }, "unknown request"},
		{"request-object", func(m map[string]any) { m["request"] = map[string]any{"kind": "Create"} }, "unreadable"},
		{"starttime-yesterday", func(m map[string]any) { m["startTime"] = "yesterday" }, "unreadable"},
		{"lasttransition-number", func(m map[string]any) { m["lastTransitionTime"] = 1764504000 }, "unreadable"},
		{"error-string", func(m map[string]any) { m["error"] = "boom" }, "unreadable"},
		{"error-details-string", func(m map[string]any) {
			m["error"] = map[string]any{"code": "X", "message": "y", "details": "not a list"}
		}, "unreadable"},
		{"internalid-number", func(m map[string]any) { m["internalId"] = 42 }, "unreadable"},
		{"notificationuri-object", func(m map[string]any) { m["notificationUri"] = map[string]any{"url": "x"} }, "unreadable"},
		{"terminal-notificationuri-number", func(m map[string]any) { m["status"] = "Succeeded"; m["notificationUri"] = 7 }, "unreadable"},
	}
	refs := []itemRef{}
	for _, it := range items {
		m := base(it.id)
		it.change(m)
		body, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, s.fe.PutRawOperation(ctx, subA, body))
		require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-" + it.id, PartitionKey: subA,
			Key: clusterKey(subA, "c-"+it.id), InternalID: iid, ActiveOperationID: it.id, ProvisioningState: "Accepted"}))
		refs = append(refs, opRef(subA, it.id), resRef(subA, "res-"+it.id))
	}
	// The good ones, in two subscriptions.
	s.seedOp(subA, "good-a", iid, "")
	s.seedOp(subB, "good-b", iid, "")
	before := s.snapshot(refs...)

	for _, it := range items {
		t.Run(it.id, func(t *testing.T) {
			defer s.use(t)()
			s.sim.ResetStats()
			r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, it.id))))
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "invalid", outcome(t, r))
			s.requireLog(t, r, testenv.HostError, "left as it is", it.log)
			require.Zero(t, s.csRequests(), "no Cluster Service call for an unusable item")
			s.requireAlive()
		})
	}
	s.requireUnchanged(before, "nothing was written to the unusable items or their resources")
	require.Empty(t, s.arm.Bodies(), "no notification from an unusable item")

	// scan lists the good operations whatever the ill-typed items around
	// them, skipping (and logging) what cannot make a message; whatever it
	// lists, poll answers 200.
	require.NoError(t, s.fe.PutRawOperation(ctx, "", []byte(`{"id":"no-subscription","partitionKey":"","request":"Create","status":"Accepted"}`)))
	r, raw := s.post("scan", []byte(`{"Data":{"timer":{"IsPastDue":false}},"Metadata":{}}`))
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	s.requireLog(t, r, testenv.HostError, "operation skipped: poll could not act on it", "no-subscription")
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(r.Outputs["operations"], &msgs), string(raw))
	var listed []string
	for _, m := range msgs {
		var batch struct {
			Operations []map[string]string
		}
		require.NoError(t, json.Unmarshal(m, &batch))
		for _, op := range batch.Operations {
			listed = append(listed, op["subscriptionId"]+"/"+op["operationId"])
		}
	}
	require.Contains(t, listed, subA+"/good-a")
	require.Contains(t, listed, subB+"/good-b")
	for _, m := range msgs {
		r := s.poll(string(m))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
	}
	require.Equal(t, "Provisioning", s.opStatus(subA, "good-a"))
	require.Equal(t, "Provisioning", s.opStatus(subB, "good-b"))
	s.requireUnchanged(before, "nothing was written to the unusable items by the polls scan asked for")
	s.requireNoLockLeft(subA)
	s.requireAlive()
}

// TestUnreadableResourcesItems writes Resources items a poll cannot take
// for the operation's: a declared field of the wrong type, and two items
// whose keys differ only in case. The operations end all the same, as
// with a missing item, and an Error line names the items: an update's are
// left exactly as they were for a person to fix, a finished delete's are
// deleted with the children.
func TestUnreadableResourcesItems(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	require.NoError(t, s.sim.AddCluster("cu", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seedOp(subA, "op-illtyped", "/api/aro_hcp/v1alpha1/clusters/cu", "")
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-op-illtyped", PartitionKey: subA,
		Key: clusterKey(subA, "c-op-illtyped"), InternalID: "/api/aro_hcp/v1alpha1/clusters/cu",
		ActiveOperationID: "op-illtyped", Extra: map[string]any{"provisioningState": 5}}))
	s.seedOp(subA, "op-twice", "/api/aro_hcp/v1alpha1/clusters/cu", "")
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-op-twice-copy", PartitionKey: subA,
		Key: strings.ToUpper(clusterKey(subA, "c-op-twice")), InternalID: "/api/aro_hcp/v1alpha1/clusters/cu",
		ActiveOperationID: "op-twice", ProvisioningState: "Accepted"}))
	left := s.snapshot(resRef(subA, "res-op-illtyped"), resRef(subA, "res-op-twice"), resRef(subA, "res-op-twice-copy"))

	require.NoError(t, s.sim.AddCluster("cv", clustersim.Script{}))
	s.seed(subB, "op-del", "Delete", "Deleting", clusterKey(subB, "cv"), "/api/clusters_mgmt/v1/clusters/cv")
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-op-del", PartitionKey: subB,
		Key: clusterKey(subB, "cv"), InternalID: "/api/clusters_mgmt/v1/clusters/cv",
		ActiveOperationID: "op-del", Extra: map[string]any{"provisioningState": []int{1}}}))
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-np1", PartitionKey: subB,
		Key: clusterKey(subB, "cv") + "/nodePools/np1", InternalID: "/api/aro_hcp/v1alpha1/clusters/cv/node_pools/np1",
		ProvisioningState: "Succeeded"}))
	require.NoError(t, s.sim.DeleteCluster("cv", 5*time.Second))
	s.clock.Advance(10 * time.Second)

	for _, tc := range []struct {
		sub, op, outcome, status string
		log                      []string
	}{
		{subA, "op-illtyped", "updated", "Provisioning", []string{"left for a person", "id=res-op-illtyped", "cannot unmarshal number"}},
		{subA, "op-twice", "updated", "Provisioning", []string{"left for a person", "id=res-op-twice ", "id=res-op-twice-copy ", "2 items share the key"}},
		{subB, "op-del", "deleted", "Succeeded", []string{"deleted with the finished delete", "id=res-op-del "}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			defer s.use(t)()
			r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, tc.sub, tc.op))))
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, tc.outcome, outcome(t, r))
			require.Equal(t, tc.status, s.opStatus(tc.sub, tc.op))
			s.requireLog(t, r, testenv.HostError, tc.log...)
			s.requireNoLockLeft(tc.sub)
		})
	}
	s.requireUnchanged(left, "an update's unreadable Resources items are left for a person")
	for _, ref := range []itemRef{resRef(subB, "res-op-del"), resRef(subB, "res-np1")} {
		require.Nil(t, s.snapshot(ref)[ref], "%s should be deleted", ref.id)
	}
	var notified []string
	for _, n := range s.arm.Bodies() {
		notified = append(notified, fmt.Sprint(n["name"], "=", n["status"]))
	}
	require.Equal(t, []string{"op-del=Succeeded"}, notified)
}

// TestLongInvocationIDStillPolls: the invocation id header becomes part of
// the lock owner (the lock item and the x-opstatus-owner header of every
// Cosmos request under the lock); a 16 KiB id must not make Cosmos refuse them.
func TestLongInvocationIDStillPolls(t *testing.T) {
	s := startStack(t)
	require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seedOp(subA, "op-long-id", "/api/aro_hcp/v1alpha1/clusters/c1", "")
	id := strings.Repeat("i", 16<<10)
	req, err := http.NewRequest(http.MethodPost, s.url+"/poll",
		bytes.NewReader(envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-long-id"}`, subA)))))
	require.NoError(t, err)
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	r, _ := s.do(req, id)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "updated", outcome(t, r), "%.600s", strings.ReplaceAll(strings.Join(r.Logs, "\n"), id, "<16 KiB id>"))
}

// TestClusterServiceStringsAreBounded: strings from a Cluster Service reply
// reach logs, the operation item and the ARM notification only cut to their
// bounds, however long they are within the 1 MiB reply limit.
func TestClusterServiceStringsAreBounded(t *testing.T) {
	cs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "/cerr/") {
			_, _ = io.WriteString(w, `{"kind":"ClusterStatus","state":"error","provision_error_code":"`+
				strings.Repeat("C", 300_000)+`","provision_error_message":"`+strings.Repeat("M", 600_000)+`"}`)
			return
		}
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","state":"`+strings.Repeat("s", 900_000)+`"}`)
	}))
	t.Cleanup(cs.Close)
	s := startStack(t, "CLUSTER_SERVICE_URL="+cs.URL)

	pollOp := func(op string) string {
		t.Helper()
		r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, op))))
		require.Equal(t, http.StatusOK, r.Status)
		return outcome(t, r)
	}
	s.seedOp(subA, "op-state", "/api/clusters_mgmt/v1/clusters/cstate", "")
	require.Equal(t, "unchanged", pollOp("op-state"))
	for _, line := range strings.Split(s.stdout.String()+s.stderr.String(), "\n") {
		require.Less(t, len(line), 16<<10, "a Cluster Service state was logged whole")
	}

	s.seedOp(subA, "op-err", "/api/clusters_mgmt/v1/clusters/cerr", s.armURL+"/notify/op-err")
	require.Equal(t, "updated", pollOp("op-err"))
	op, err := s.fe.Operation(context.Background(), subA, "op-err")
	require.NoError(t, err)
	require.Equal(t, "Failed", op["status"])
	stored, err := json.Marshal(op["error"])
	require.NoError(t, err)
	require.Less(t, len(stored), 64<<10, "a Cluster Service error of %d bytes was written to the operation", len(stored))
}
