// Command receiver is the remote-write sink's server: a Prometheus
// remote-write 1.0 receiver standing in for an Azure Monitor workspace's
// data collection endpoint. It decodes with Prometheus's own prompb types,
// so the writer is held to Prometheus's schema, not a copy of it. It is a
// module of its own because Prometheus's requirements would raise the
// Azure SDK, MSAL and gRPC versions the handler builds with.
//
// It serves on a loopback port and prints "listening on <url>" once ready.
// POST <Path> takes writes carrying "Bearer <-token>"; GET /received
// answers what it took and refused, as JSON, for the test that runs it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// Path is the data collection rule's write path.
const Path = "/dataCollectionRules/dcr-00000000000000000000000000000000/streams/Microsoft-PrometheusMetrics/api/v1/write"

// sample is one received sample with its series' labels (__name__ among
// them).
type sample struct {
	Labels map[string]string
	Value  float64
	MS     int64
}

// received is what GET /received answers.
type received struct {
	Samples  []sample
	Requests int
	Refused  []string
}

type sink struct {
	token string

	mu  sync.Mutex
	got received
}

func main() {
	token := flag.String("token", "", "the bearer token writes must carry")
	flag.Parse()
	if *token == "" {
		log.Fatal("-token is required")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := &sink{token: *token}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /received", s.received)
	mux.HandleFunc("/", s.write)
	fmt.Printf("listening on http://%s%s?api-version=2023-04-24\n", ln.Addr(), Path)
	log.Fatal(http.Serve(ln, mux))
}

func (s *sink) received(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.got)
}

func (s *sink) refuse(w http.ResponseWriter, code int, why string) {
	s.mu.Lock()
	s.got.Refused = append(s.got.Refused, why)
	s.mu.Unlock()
	http.Error(w, why, code)
}

func (s *sink) write(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method != http.MethodPost || r.URL.Path != Path || r.URL.Query().Get("api-version") != "2023-04-24":
		s.refuse(w, http.StatusNotFound, fmt.Sprintf("%s %s", r.Method, r.URL))
		return
	case r.Header.Get("Authorization") != "Bearer "+s.token:
		s.refuse(w, http.StatusUnauthorized, "bad or missing bearer token")
		return
	case r.Header.Get("Content-Encoding") != "snappy", r.Header.Get("Content-Type") != "application/x-protobuf",
		r.Header.Get("X-Prometheus-Remote-Write-Version") != "0.1.0":
		s.refuse(w, http.StatusBadRequest, "not a remote-write 1.0 request")
		return
	}
	compressed, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		s.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	body, err := snappy.Decode(nil, compressed)
	if err != nil {
		s.refuse(w, http.StatusBadRequest, "snappy: "+err.Error())
		return
	}
	samples, err := decode(body)
	if err != nil {
		s.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	s.got.Samples = append(s.got.Samples, samples...)
	s.got.Requests++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// decode reads a WriteRequest. A field Prometheus does not declare, at any
// level, is an error rather than dropped, and so is one it declares that
// opstatus never sends (metadata, exemplars, native histograms): a writer
// that sent either would not be the one the tests think they check.
func decode(body []byte) ([]sample, error) {
	var req prompb.WriteRequest
	if err := req.Unmarshal(body); err != nil {
		return nil, fmt.Errorf("WriteRequest: %w", err)
	}
	if err := errors.Join(unknown("WriteRequest", req.XXX_unrecognized), unsent("WriteRequest", "metadata", len(req.Metadata))); err != nil {
		return nil, err
	}
	var out []sample
	for _, ts := range req.Timeseries {
		if err := errors.Join(unknown("TimeSeries", ts.XXX_unrecognized),
			unsent("TimeSeries", "exemplars", len(ts.Exemplars)), unsent("TimeSeries", "histograms", len(ts.Histograms))); err != nil {
			return nil, err
		}
		labels := map[string]string{}
		for j, l := range ts.Labels {
			if err := unknown("Label", l.XXX_unrecognized); err != nil {
				return nil, err
			}
			if j > 0 && l.Name <= ts.Labels[j-1].Name {
				return nil, fmt.Errorf("labels not sorted by name: %q after %q", l.Name, ts.Labels[j-1].Name)
			}
			labels[l.Name] = l.Value
		}
		if labels["__name__"] == "" {
			return nil, errors.New("a series without __name__")
		}
		for _, smp := range ts.Samples {
			if err := unknown("Sample", smp.XXX_unrecognized); err != nil {
				return nil, err
			}
			out = append(out, sample{Labels: labels, Value: smp.Value, MS: smp.Timestamp})
		}
	}
	return out, nil
}

func unknown(message string, unrecognized []byte) error {
	if len(unrecognized) > 0 {
		return fmt.Errorf("%s: a field outside Prometheus's schema", message)
	}
	return nil
}

func unsent(message, field string, n int) error {
	if n > 0 {
		return fmt.Errorf("%s: %s, which opstatus never sends", message, field)
	}
	return nil
}
