package remotewritesink

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// prometheusVersion is the module version the Makefile builds promtool
// from.
const prometheusVersion = "v0.316.0"

// protoField is one field of a .proto message as Prometheus declares it.
type protoField struct {
	repeated bool
	typ      string // scalar type, or the message's name without package
	number   int
}

var (
	messageRE = regexp.MustCompile(`(?m)^message (\w+) \{\n((?:.*\n)*?)\}`)
	fieldRE   = regexp.MustCompile(`(?m)^\s*(repeated\s+)?([\w.]+)\s+(\w+)\s*=\s*(\d+)`)
)

// prometheusSchema reads the messages of prompb/types.proto and remote.proto
// at prometheusVersion, from the module cache (where `make promtool` leaves
// it) or the module proxy. Without either it skips, and fails when CI=true.
func prometheusSchema(t *testing.T) map[string]map[string]protoField {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/prometheus/prometheus@"+prometheusVersion).Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err != nil || mod.Error != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Prometheus %s: %v %s", prometheusVersion, err, mod.Error)
		}
		t.Skipf("Prometheus %s is neither in the module cache nor reachable: %v %s", prometheusVersion, err, mod.Error)
	}
	dir := filepath.Join(mod.Dir, "prompb")
	schema := map[string]map[string]protoField{}
	for _, file := range []string{"types.proto", "remote.proto"} {
		src, err := os.ReadFile(filepath.Join(dir, file))
		require.NoError(t, err)
		for _, m := range messageRE.FindAllStringSubmatch(string(src), -1) {
			fields := map[string]protoField{}
			for _, f := range fieldRE.FindAllStringSubmatch(m[2], -1) {
				n, err := strconv.Atoi(f[4])
				require.NoError(t, err)
				fields[f[3]] = protoField{repeated: f[1] != "", typ: strings.TrimPrefix(f[2], "prometheus."), number: n}
			}
			schema[m[1]] = fields
		}
	}
	return schema
}

// The sink's schema is Prometheus's, field for field: a field number, type
// or cardinality of its own would let a writer that agrees with it pass
// while Azure Monitor refuses or misreads the request. It leaves out only
// fields opstatus never sends.
func TestSchemaIsPrometheus(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	require.Contains(t, string(makefile), "PROMTOOL_VERSION := "+prometheusVersion, "the version the Makefile pins")

	schema := prometheusSchema(t)
	seen := map[string]bool{}
	var check func(md protoreflect.MessageDescriptor)
	check = func(md protoreflect.MessageDescriptor) {
		name := string(md.Name())
		if seen[name] {
			return
		}
		seen[name] = true
		theirs, ok := schema[name]
		require.True(t, ok, "Prometheus has no message %s", name)
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			want, ok := theirs[string(fd.Name())]
			require.True(t, ok, "Prometheus's %s has no field %s", name, fd.Name())
			typ := fd.Kind().String()
			if fd.Kind() == protoreflect.MessageKind {
				typ = string(fd.Message().Name())
				check(fd.Message())
			}
			require.Equal(t, want, protoField{repeated: fd.IsList(), typ: typ, number: int(fd.Number())}, "%s.%s", name, fd.Name())
		}
	}
	check(writeRequest)
	require.Len(t, seen, 4, "WriteRequest, TimeSeries, Label, Sample")
}

// request encodes a WriteRequest of one series and one sample, letting a
// case change a field number or wire type.
type request struct {
	seriesField, labelNameField, labelValueField, valueField, timestampField protowire.Number
	timestampType                                                            protowire.Type
	extraSeriesField                                                         protowire.Number
}

func (r request) encode() []byte {
	label := func(name, value string) []byte {
		var l []byte
		l = protowire.AppendTag(l, r.labelNameField, protowire.BytesType)
		l = protowire.AppendString(l, name)
		l = protowire.AppendTag(l, r.labelValueField, protowire.BytesType)
		return protowire.AppendString(l, value)
	}
	var smp []byte
	smp = protowire.AppendTag(smp, r.valueField, protowire.Fixed64Type)
	smp = protowire.AppendFixed64(smp, math.Float64bits(2.5))
	smp = protowire.AppendTag(smp, r.timestampField, r.timestampType)
	if r.timestampType == protowire.Fixed64Type {
		smp = protowire.AppendFixed64(smp, 1000)
	} else {
		smp = protowire.AppendVarint(smp, 1000)
	}
	var ts []byte
	for _, l := range [][2]string{{"__name__", "up"}, {"job", "opstatus"}} {
		ts = protowire.AppendTag(ts, 1, protowire.BytesType)
		ts = protowire.AppendBytes(ts, label(l[0], l[1]))
	}
	ts = protowire.AppendTag(ts, 2, protowire.BytesType)
	ts = protowire.AppendBytes(ts, smp)
	if r.extraSeriesField != 0 {
		ts = protowire.AppendTag(ts, r.extraSeriesField, protowire.BytesType)
		ts = protowire.AppendBytes(ts, nil)
	}
	var b []byte
	b = protowire.AppendTag(b, r.seriesField, protowire.BytesType)
	return protowire.AppendBytes(b, ts)
}

// A request that deviates from Prometheus's schema anywhere in it is
// refused, not read with a field missing.
func TestDecodeRefusesWhatTheSchemaDoesNot(t *testing.T) {
	good := request{seriesField: 1, labelNameField: 1, labelValueField: 2, valueField: 1, timestampField: 2, timestampType: protowire.VarintType}
	samples, err := decode(good.encode())
	require.NoError(t, err)
	require.Equal(t, []Sample{{Labels: map[string]string{"__name__": "up", "job": "opstatus"}, Value: 2.5, MS: 1000}}, samples)

	for _, tc := range []struct {
		name   string
		change func(*request)
		want   string
	}{
		{"series under metadata's number", func(r *request) { r.seriesField = 3 }, "WriteRequest: a field outside"},
		{"label name and value swapped", func(r *request) { r.labelNameField, r.labelValueField = 2, 1 }, "labels not sorted"},
		{"label value under 3", func(r *request) { r.labelValueField = 3 }, "Label: a field outside"},
		{"value under 3", func(r *request) { r.valueField = 3 }, "Sample: a field outside"},
		{"timestamp under 3", func(r *request) { r.timestampField = 3 }, "Sample: a field outside"},
		{"timestamp as fixed64", func(r *request) { r.timestampType = protowire.Fixed64Type }, "Sample: a field outside"},
		{"exemplars", func(r *request) { r.extraSeriesField = 3 }, "TimeSeries: a field outside"},
		{"native histograms", func(r *request) { r.extraSeriesField = 4 }, "TimeSeries: a field outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.change(&r)
			_, err := decode(r.encode())
			require.ErrorContains(t, err, tc.want)
		})
	}
}
