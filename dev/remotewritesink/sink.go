// Package remotewritesink is a Prometheus remote-write 1.0 receiver for
// tests, standing in for an Azure Monitor workspace's data collection
// endpoint: it refuses a request without the expected bearer token or
// remote-write headers, decodes the snappy-compressed WriteRequest with the
// protobuf runtime against the message schema of Prometheus's
// prompb/types.proto and remote.proto, and keeps the samples in memory. It
// never ships.
//
// The schema is built here rather than imported from Prometheus's prompb:
// that module's requirements would raise the Azure SDK, MSAL and gRPC
// versions the handler itself builds with. The tests hold it to the .proto
// files of the Prometheus version the Makefile builds promtool from.
package remotewritesink

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Sample is one received sample with its series' labels (__name__ among
// them).
type Sample struct {
	Labels map[string]string
	Value  float64
	MS     int64
}

// Sink is a running receiver. Its methods are safe for concurrent use.
type Sink struct {
	// URL is the write endpoint, in the form of a data collection rule's.
	URL string

	token string
	srv   *http.Server

	mu       sync.Mutex
	samples  []Sample
	requests int
	refused  []string
}

// Path is the data collection rule's write path the sink serves.
const Path = "/dataCollectionRules/dcr-00000000000000000000000000000000/streams/Microsoft-PrometheusMetrics/api/v1/write"

// Start serves a sink on a loopback port that accepts only requests
// carrying "Bearer "+token.
func Start(token string) (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{URL: "http://" + ln.Addr().String() + Path + "?api-version=2023-04-24", token: token}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the sink.
func (s *Sink) Close() error { return s.srv.Close() }

func (s *Sink) refuse(w http.ResponseWriter, code int, why string) {
	s.mu.Lock()
	s.refused = append(s.refused, why)
	s.mu.Unlock()
	http.Error(w, why, code)
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
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
	s.samples = append(s.samples, samples...)
	s.requests++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Samples returns every sample received so far.
func (s *Sink) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...)
}

// Requests is the number of requests accepted.
func (s *Sink) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Refused lists why each refused request was refused.
func (s *Sink) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refused...)
}

// Last returns the value of the latest sample of the series named name whose
// labels include want, and whether there is one.
func (s *Sink) Last(name string, want map[string]string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v float64
	var at int64 = -1
next:
	for _, smp := range s.samples {
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

// writeRequest is the descriptor of prometheus.WriteRequest.
var writeRequest = func() protoreflect.MessageDescriptor {
	msg := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	const (
		opt = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		rep = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		str = descriptorpb.FieldDescriptorProto_TYPE_STRING
		dbl = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
		i64 = descriptorpb.FieldDescriptorProto_TYPE_INT64
		sub = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("remotewritesink/remote.proto"),
		Package: proto.String("prometheus"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			msg("Label", field("name", 1, str, opt, ""), field("value", 2, str, opt, "")),
			msg("Sample", field("value", 1, dbl, opt, ""), field("timestamp", 2, i64, opt, "")),
			msg("TimeSeries", field("labels", 1, sub, rep, ".prometheus.Label"), field("samples", 2, sub, rep, ".prometheus.Sample")),
			msg("WriteRequest", field("timeseries", 1, sub, rep, ".prometheus.TimeSeries")),
		},
	}, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().ByName("WriteRequest")
}()

// decode reads a WriteRequest. A field the schema does not know, or a known
// field number with another wire type, is an error at every level, and so
// is a field Prometheus knows that opstatus never sends (exemplars, native
// histograms, metadata): the schema leaves them out.
func decode(body []byte) ([]Sample, error) {
	m := dynamicpb.NewMessage(writeRequest)
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("WriteRequest: %w", err)
	}
	if err := known(m); err != nil {
		return nil, err
	}
	var out []Sample
	series := m.Get(writeRequest.Fields().ByName("timeseries")).List()
	for i := range series.Len() {
		ts := series.Get(i).Message()
		labels := map[string]string{}
		prev := ""
		ls := ts.Get(ts.Descriptor().Fields().ByName("labels")).List()
		for j := range ls.Len() {
			l := ls.Get(j).Message()
			name := l.Get(l.Descriptor().Fields().ByName("name")).String()
			if name <= prev && j > 0 {
				return nil, fmt.Errorf("labels not sorted by name: %q after %q", name, prev)
			}
			prev = name
			labels[name] = l.Get(l.Descriptor().Fields().ByName("value")).String()
		}
		if labels["__name__"] == "" {
			return nil, fmt.Errorf("a series without __name__")
		}
		ss := ts.Get(ts.Descriptor().Fields().ByName("samples")).List()
		for j := range ss.Len() {
			smp := ss.Get(j).Message()
			out = append(out, Sample{
				Labels: labels,
				Value:  smp.Get(smp.Descriptor().Fields().ByName("value")).Float(),
				MS:     smp.Get(smp.Descriptor().Fields().ByName("timestamp")).Int(),
			})
		}
	}
	return out, nil
}

// known refuses a message, or any message inside it, that carries fields
// outside the schema.
func known(m protoreflect.Message) error {
	if len(m.GetUnknown()) > 0 {
		return fmt.Errorf("%s: a field outside Prometheus's schema", m.Descriptor().Name())
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() != protoreflect.MessageKind:
		case fd.IsList():
			for i := range v.List().Len() {
				if err = known(v.List().Get(i).Message()); err != nil {
					return false
				}
			}
		default:
			err = known(v.Message())
		}
		return err == nil
	})
	return err
}
