package hostemu

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOutputMessages(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		dataType string
		want     []string
	}{
		{name: "array of objects", raw: `[{"subscriptionId":"s","operationId":"o1"}, {"b": [1, 2]}]`,
			want: []string{`{"subscriptionId":"s","operationId":"o1"}`, `{"b":[1,2]}`}},
		{name: "array elements: strings as they are, others as JSON, nulls dropped", raw: `["plain", "aGVsbG8=", 42, true, null, [1]]`,
			want: []string{"plain", "aGVsbG8=", "42", "true", "[1]"}},
		{name: "empty array", raw: `[]`, want: []string{}},
		{name: "null", raw: `null`, want: nil},
		{name: "object", raw: `{"a": "<b>"}`, want: []string{`{"a":"<b>"}`}},
		{name: "string that is not base64", raw: `"not base64!"`, want: []string{"not base64!"}},
		{name: "string that happens to be base64 is decoded", raw: `"aGVsbG8="`, want: []string{"hello"}},
		{name: "JSON text in a string is not base64", raw: `"{\"a\":1}"`, want: []string{`{"a":1}`}},
		{name: "binary keeps base64 strings", raw: `"aGVsbG8="`, dataType: "binary", want: []string{"aGVsbG8="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, err := outputMessages(json.RawMessage(tt.raw), tt.dataType)
			require.NoError(t, err)
			if tt.want == nil {
				require.Empty(t, msgs)
				return
			}
			got := make([]string, len(msgs))
			for i, m := range msgs {
				got[i] = string(m)
			}
			require.Equal(t, tt.want, got)
		})
	}
	_, err := outputMessages(json.RawMessage(`[{"a":`), "")
	require.Error(t, err)
}

func TestMessageEncoding(t *testing.T) {
	content := []byte(`{"subscriptionId":"s"}`)
	text := encodeMessage(content, EncodingBase64)
	require.Equal(t, "eyJzdWJzY3JpcHRpb25JZCI6InMifQ==", text)
	back, err := decodeMessage(text, EncodingBase64)
	require.NoError(t, err)
	require.Equal(t, content, back)

	require.Equal(t, string(content), encodeMessage(content, EncodingNone))
	back, err = decodeMessage(string(content), EncodingNone)
	require.NoError(t, err)
	require.Equal(t, content, back)

	_, err = decodeMessage(`{"not":"base64"}`, EncodingBase64)
	require.ErrorContains(t, err, "not valid base64")

	// Convert.FromBase64String ignores white space.
	back, err = decodeMessage("aGVs\r\nbG8=", EncodingBase64)
	require.NoError(t, err)
	require.Equal(t, "hello", string(back))
}

func TestHostFormats(t *testing.T) {
	ts := time.Date(2025, 3, 1, 10, 0, 5, 123456700, time.UTC)
	require.Equal(t, "2025-03-01T10:00:05.1234567+00:00", dateTime(ts))
	require.Equal(t, "2025-03-01T10:00:05+00:00", dateTime(ts.Truncate(time.Second)))
	require.Equal(t, "0001-01-01T00:00:00", dateTime(time.Time{}))
	require.Equal(t, "2025-03-01T10:00:05+00:00", offsetTime(&ts))
	require.Empty(t, offsetTime(nil))
	require.Equal(t, `"abc"`, jsonString("abc"))
	require.Equal(t, `"{\"a\":\"<b>\"}"`, jsonString(`{"a":"<b>"}`))
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, newUUID())
}

func TestBackoff(t *testing.T) {
	b := newBackoff(100*time.Millisecond, 2*time.Second)
	prev := time.Duration(0)
	for range 20 {
		d := b.next(false)
		require.GreaterOrEqual(t, d, prev, "the delay never shrinks while polls find nothing")
		require.LessOrEqual(t, d, 2*time.Second)
		prev = d
	}
	require.Equal(t, 2*time.Second, prev, "it reaches maxPollingInterval")
	require.Equal(t, 100*time.Millisecond, b.next(true), "a found message resets it")
	require.Greater(t, b.next(false), 100*time.Millisecond)
}

func TestQueueDataForms(t *testing.T) {
	text := []byte(`{"operationId":"o1"}`)
	tests := []struct {
		name     string
		form     QueueDataForm
		dataType string
		content  []byte
		want     string
	}{
		{name: "host: a JSON string holding a JSON string", form: QueueDataHost, content: text, want: `"\"{\\\"operationId\\\":\\\"o1\\\"}\""`},
		{name: "string", form: QueueDataString, content: text, want: `"{\"operationId\":\"o1\"}"`},
		{name: "JSON", form: QueueDataJSON, content: text, want: `{"operationId":"o1"}`},
		{name: "JSON form with text that is not JSON", form: QueueDataJSON, content: []byte("plain"), want: `"plain"`},
		{name: "binary data type is base64", form: QueueDataHost, dataType: "binary", content: []byte("hi"), want: `"aGk="`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &poller{
				h:  &Host{opts: Options{QueueData: tt.form}},
				fn: &Function{Queue: &QueueTrigger{DataType: tt.dataType}},
			}
			got, err := marshal(p.triggerValue(tt.content))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}
