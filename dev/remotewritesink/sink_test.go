package remotewritesink

import (
	"bytes"
	"cmp"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// The receiver decodes with the prompb of the Prometheus whose promtool
// checks the alert rules: one Prometheus version in the repository.
func TestReceiverIsTheMakefilesPrometheus(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	gomod, err := os.ReadFile("receiver/go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/prometheus/prometheus (v\S+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "the receiver requires Prometheus")
	require.Contains(t, string(makefile), "PROMTOOL_VERSION := "+string(m[1])+"\n")
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

// post sends body as a remote-write 1.0 request with token, after edit
// has changed the request, and returns the status and the answer's body.
func post(t *testing.T, url, token string, body []byte, edit func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(snappy.Encode(nil, body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(answer)
}

// A request that deviates from Prometheus's schema anywhere in it, or is
// not a remote-write 1.0 request to the rule with the token, is refused,
// not read with a field missing.
func TestReceiverRefusesWhatPrometheusDoesNot(t *testing.T) {
	sink := Start(t, "token")
	good := request{seriesField: 1, labelNameField: 1, labelValueField: 2, valueField: 1, timestampField: 2, timestampType: protowire.VarintType}
	code, answer := post(t, sink.URL, "token", good.encode(), nil)
	require.Equal(t, http.StatusNoContent, code, answer)
	require.Equal(t, []Sample{{Labels: map[string]string{"__name__": "up", "job": "opstatus"}, Value: 2.5, MS: 1000}}, sink.Samples())
	v, ok := sink.Last("up", map[string]string{"job": "opstatus"})
	require.True(t, ok)
	require.Equal(t, 2.5, v)

	for _, tc := range []struct {
		name   string
		change func(*request)
		edit   func(*http.Request)
		token  string
		code   int
		want   string
	}{
		{name: "series under metadata's number", change: func(r *request) { r.seriesField = 3 }, want: "WriteRequest: "},
		{name: "label name and value swapped", change: func(r *request) { r.labelNameField, r.labelValueField = 2, 1 }, want: "labels not sorted"},
		{name: "label value under 3", change: func(r *request) { r.labelValueField = 3 }, want: "Label: a field outside"},
		{name: "value under 3", change: func(r *request) { r.valueField = 3 }, want: "Sample: a field outside"},
		{name: "timestamp under 3", change: func(r *request) { r.timestampField = 3 }, want: "Sample: a field outside"},
		{name: "timestamp as fixed64", change: func(r *request) { r.timestampType = protowire.Fixed64Type }, want: "wrong wireType"},
		{name: "exemplars", change: func(r *request) { r.extraSeriesField = 3 }, want: "TimeSeries: exemplars, which opstatus never sends"},
		{name: "native histograms", change: func(r *request) { r.extraSeriesField = 4 }, want: "TimeSeries: histograms, which opstatus never sends"},
		{name: "another token", token: "someone else's", code: http.StatusUnauthorized, want: "bad or missing bearer token"},
		{name: "not snappy", edit: func(r *http.Request) { r.Header.Del("Content-Encoding") }, code: http.StatusBadRequest, want: "not a remote-write 1.0 request"},
		{name: "remote-write 2.0", edit: func(r *http.Request) { r.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0") }, code: http.StatusBadRequest, want: "not a remote-write 1.0 request"},
		{name: "another path", edit: func(r *http.Request) { r.URL.Path += "/v2" }, code: http.StatusNotFound, want: "POST "},
		{name: "no api-version", edit: func(r *http.Request) { r.URL.RawQuery = "" }, code: http.StatusNotFound, want: "POST "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, token, want := good, cmp.Or(tc.token, "token"), cmp.Or(tc.code, http.StatusBadRequest)
			if tc.change != nil {
				tc.change(&r)
			}
			code, answer := post(t, sink.URL, token, r.encode(), tc.edit)
			require.Equal(t, want, code, answer)
			require.Contains(t, answer, tc.want)
			require.Contains(t, sink.Refused(), strings.TrimSuffix(answer, "\n"), "the sink lists why")
		})
	}
	require.Equal(t, 1, sink.Requests(), "only the good request was taken")
	require.Len(t, sink.Samples(), 1)
}
