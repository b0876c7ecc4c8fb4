// Package remotewritesink runs a Prometheus remote-write 1.0 receiver for
// tests, standing in for an Azure Monitor workspace's data collection
// endpoint: it refuses a request without the expected bearer token or
// remote-write headers, decodes the snappy-compressed WriteRequest with
// Prometheus's prompb types, refusing fields outside them, and keeps the
// samples. It never ships.
//
// The receiver is a program in a module of its own (receiver/), run as a
// process: Prometheus's requirements would raise the Azure SDK, MSAL and
// gRPC versions the handler builds with.
package remotewritesink

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/internal/testenv"
)

// Sample is one received sample with its series' labels (__name__ among
// them).
type Sample struct {
	Labels map[string]string
	Value  float64
	MS     int64
}

// Sink is a running receiver.
type Sink struct {
	// URL is the write endpoint, in the form of a data collection rule's.
	URL string

	t testing.TB
}

// Start builds the receiver and runs it on a loopback port, accepting only
// requests that carry "Bearer "+token, until t ends. Like every test
// server it skips t under -short; the test's package needs testenv.Main.
func Start(t testing.TB, token string) *Sink {
	t.Helper()
	bin := testenv.Build(t, "dev/remotewritesink/receiver")
	s := &Sink{t: t}
	testenv.Run(t, bin, []string{"-token", token}, func(line string) bool {
		url, ok := strings.CutPrefix(line, "listening on ")
		if ok {
			s.URL = url
		}
		return ok
	})
	return s
}

// received is the receiver's GET /received.
type received struct {
	Samples  []Sample
	Requests int
	Refused  []string
}

// received asks the receiver what it took and refused. A failure fails
// the test that started the sink (Errorf: the caller may be a subtest) and
// answers nothing.
func (s *Sink) received() received {
	s.t.Helper()
	base, _, _ := strings.Cut(s.URL, "/dataCollectionRules/")
	resp, err := http.Get(base + "/received")
	if err != nil {
		s.t.Errorf("remote-write sink: %v", err)
		return received{}
	}
	defer resp.Body.Close()
	var r received
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		s.t.Errorf("remote-write sink: GET /received: %s: %v", resp.Status, err)
		return received{}
	}
	return r
}

// Samples returns every sample received so far.
func (s *Sink) Samples() []Sample { return s.received().Samples }

// Requests is the number of requests accepted.
func (s *Sink) Requests() int { return s.received().Requests }

// Refused lists why each refused request was refused.
func (s *Sink) Refused() []string { return s.received().Refused }

// Last returns the value of the latest sample of the series named name whose
// labels include want, and whether there is one.
func (s *Sink) Last(name string, want map[string]string) (float64, bool) {
	var v float64
	var at int64 = -1
next:
	for _, smp := range s.Samples() {
		if smp.Labels["__name__"] != name {
			continue
		}
		for k, w := range want {
			if smp.Labels[k] != w {
				continue next
			}
		}
		if smp.MS >= at {
			v, at = smp.Value, smp.MS
		}
	}
	return v, at >= 0
}
