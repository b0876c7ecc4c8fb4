package hostemu

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOutputMessages(t *testing.T) {
	// What the queue output binding writes for each value, as the host's
	// FunctionBinding.BindAsyncCollectorAsync turns it into bytes.
	tests := []struct {
		name     string
		raw      string
		dataType string
		want     []string
	}{
		{name: "array of objects: indented JSON, one message each",
			raw: `[{"subscriptionId":"s","operationId":"o1"}, {"b": [1, 2], "c": {}, "d": []}]`,
			want: []string{
				"{\n  \"subscriptionId\": \"s\",\n  \"operationId\": \"o1\"\n}",
				"{\n  \"b\": [\n    1,\n    2\n  ],\n  \"c\": {},\n  \"d\": []\n}",
			}},
		{name: "array elements: strings as they are (no base64), numbers and booleans as .NET writes them, null as an empty message",
			raw:  `["plain", "aGVsbG8=", 42, 1.5, 2.0, 1e21, true, false, null, [1]]`,
			want: []string{"plain", "aGVsbG8=", "42", "1.5", "2", "1E+21", "True", "False", "", "[\n  1\n]"}},
		{name: "empty array", raw: `[]`, want: []string{}},
		{name: "null", raw: `null`, want: nil},
		{name: "object", raw: `{"a": "<b>", "n": 10, "f": 1.0, "u": "\u2028\u0001é"}`,
			want: []string{"{\n  \"a\": \"<b>\",\n  \"n\": 10,\n  \"f\": 1.0,\n  \"u\": \"\\u2028\\u0001é\"\n}"}},
		{name: "dates in ISO form are read as DateTime and written back by Newtonsoft",
			raw:  `[{"at":"2025-03-01T10:00:05.1200000Z","local":"2025-03-01T12:00:05+02:00","plain":"2025-03-01T10:00:05","nano":"2025-03-01T10:00:05.123456789Z"}]`,
			want: []string{"{\n  \"at\": \"2025-03-01T10:00:05.12Z\",\n  \"local\": \"2025-03-01T10:00:05+00:00\",\n  \"plain\": \"2025-03-01T10:00:05\",\n  \"nano\": \"2025-03-01T10:00:05.123456789Z\"\n}"}},
		{name: "a date element is DateTime.ToString()", raw: `["2025-03-01T10:00:05Z"]`, want: []string{"03/01/2025 10:00:05"}},
		{name: "string that is not base64", raw: `"not base64!"`, want: []string{"not base64!"}},
		{name: "string that happens to be base64 is decoded", raw: `"aGVsbG8="`, want: []string{"hello"}},
		{name: "empty string is empty base64", raw: `""`, want: []string{""}},
		{name: "string holding a JSON object is re-indented", raw: `"{\"a\":1}"`, want: []string{"{\n  \"a\": 1\n}"}},
		{name: "string holding a JSON array is one message per element", raw: `"[{\"a\":1},\"x\"]"`, want: []string{"{\n  \"a\": 1\n}", "x"}},
		{name: "binary keeps base64 strings", raw: `"aGVsbG8="`, dataType: "binary", want: []string{"aGVsbG8="}},
		{name: "lone number and boolean", raw: `7`, want: []string{"7"}},
		{name: "lone boolean", raw: `true`, want: []string{"True"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, err := outputMessages(json.RawMessage(tt.raw), tt.dataType, time.UTC)
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
	_, err := outputMessages(json.RawMessage(`[{"a":`), "", time.UTC)
	require.Error(t, err)
	_, err = outputMessages(json.RawMessage(`"{not json}"`), "", time.UTC)
	require.Error(t, err, "a string that looks like JSON and is not fails the invocation")
}

func TestDotnetDouble(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0", 1: "1", -1.5: "-1.5", 0.1: "0.1", 1e14: "100000000000000", 1e15: "1E+15",
		123456789012345678: "1.2345678901234568E+17", 0.0001: "0.0001", 0.00001: "1E-05",
		math.Copysign(0, -1): "-0", 1.7976931348623157e308: "1.7976931348623157E+308",
	} {
		require.Equal(t, want, dotnetDouble(f), "%v", f)
	}
}

func TestDotnetDates(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		berlin = time.FixedZone("CET", 3600)
	}
	tests := []struct {
		in, iso, general string // "" iso: not a date
	}{
		{in: "2025-03-01T10:00:05Z", iso: "2025-03-01T10:00:05Z", general: "03/01/2025 10:00:05"},
		{in: "2025-03-01T10:00:05.1234567Z", iso: "2025-03-01T10:00:05.1234567Z", general: "03/01/2025 10:00:05"},
		{in: "2025-03-01T10:00:05-01:30", iso: "2025-03-01T12:30:05+01:00", general: "03/01/2025 12:30:05"},
		{in: "2025-03-01T24:00:00", iso: "2025-03-02T00:00:00", general: "03/02/2025 00:00:00"},
		{in: "2025-02-29T10:00:05Z"},           // no such day
		{in: "2025-03-01T10:00:05.Z"},          // a point without digits
		{in: "2025-03-01T10:00:05.123456789Z"}, // more than seven digits
		{in: "2025-03-01 10:00:05Z"},
		{in: "not a date at all, but long enough"},
	}
	for _, tt := range tests {
		tok, err := parseJToken([]byte(newtonsoftQuote(tt.in)), berlin)
		require.NoError(t, err)
		if tt.iso == "" {
			require.Equal(t, jString, tok.kind, tt.in)
			continue
		}
		require.Equal(t, jDate, tok.kind, tt.in)
		require.Equal(t, tt.iso, tok.isoDate(), tt.in)
		require.Equal(t, tt.general, tok.valueText(), tt.in)
	}
}

func TestNewtonsoftQuote(t *testing.T) {
	require.Equal(t, `"a\"b\\c\n\r\t\b\f\u0001\u001f<>&'é\u0085\u2028\u2029"`,
		newtonsoftQuote("a\"b\\c\n\r\t\b\f\x01\x1f<>&'é\u0085\u2028\u2029"))
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
	require.Equal(t, "2025-03-01T10:00:05+00:00", offsetTime(&ts, time.Time{}))
	require.Equal(t, "9999-12-31T23:59:59+00:00", offsetTime(nil, dateTimeOffsetMax))
	require.Equal(t, `"abc"`, jsonString("abc"))
	require.Equal(t, `"{\"a\":\"<b>\"}"`, jsonString(`{"a":"<b>"}`))
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, newUUID())
}

func TestBackoff(t *testing.T) {
	// RandomizedExponentialBackoffStrategy: the first empty poll waits the
	// minimum, then min + 2^(n-1) × min × [0.8, 1.2), up to the maximum.
	b := newBackoff(100*time.Millisecond, 2*time.Second)
	require.Equal(t, 100*time.Millisecond, b.next(false))
	d := b.next(false)
	require.GreaterOrEqual(t, d, 180*time.Millisecond)
	require.Less(t, d, 220*time.Millisecond)
	d = b.next(false)
	require.GreaterOrEqual(t, d, 260*time.Millisecond)
	require.Less(t, d, 340*time.Millisecond)
	prev := d
	for range 20 {
		d := b.next(false)
		require.GreaterOrEqual(t, d, prev, "the delay never shrinks while polls find nothing")
		require.LessOrEqual(t, d, 2*time.Second)
		prev = d
	}
	require.Equal(t, 2*time.Second, prev, "it reaches maxPollingInterval")
	require.Equal(t, 100*time.Millisecond, b.next(true), "a found message resets it")
	d = b.next(false)
	require.GreaterOrEqual(t, d, 180*time.Millisecond)
	require.Less(t, d, 220*time.Millisecond)
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

func TestQueueMetadata(t *testing.T) {
	// The metadata of a queue invocation: the trigger's binding data, then
	// the message's own top-level properties over it
	// (Utility.ApplyBindingData), as the host serializes them.
	meta := newBindingData()
	meta.set("QueueTrigger", "text")
	meta.set("DequeueCount", "1")
	meta.set("Id", jsonString("id-1"))
	meta.set("sys", map[string]any{"MethodName": "poll"})
	applyMessageProperties(meta, ` {"subscriptionId":"sub","operationId":"op","scanInterval":10,"ratio":0.5,"ok":true,
		"scannedAt":"2025-03-01T10:00:10Z","nested":{"at":"2025-03-01T10:00:10.5Z","n":[1]},"operations":[{"a":1}],
		"none":null,"id":"from-message","myTrigger":"x"} `, time.UTC)
	raw, err := marshal(meta)
	require.NoError(t, err)
	var got map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &got))
	want := map[string]string{
		"DequeueCount":   `"1"`,
		"Id":             `"\"from-message\""`, // the message's "id" replaces Id, keeping its spelling
		"sys":            `{"MethodName":"poll"}`,
		"subscriptionId": `"\"sub\""`,
		"operationId":    `"\"op\""`,
		"scanInterval":   `"\"10\""`,
		"ratio":          `"\"0.5\""`,
		"ok":             `"\"True\""`,
		"scannedAt":      `"\"03/01/2025 10:00:10\""`,
		"nested":         `{"at":"2025-03-01T10:00:10.5Z","n":[1]}`,
	}
	require.Len(t, got, len(want), "no QueueTrigger or other *trigger key, no arrays, no nulls: %s", raw)
	for k, v := range want {
		require.JSONEq(t, v, string(got[k]), k)
	}

	// Text that is not a JSON object adds nothing.
	for _, text := range []string{`[{"a":1}]`, `plain`, `{"a":`, `"{\"a\":1}"`} {
		m := newBindingData()
		applyMessageProperties(m, text, time.UTC)
		require.Empty(t, m.keys, text)
	}
}

func TestLineSplitter(t *testing.T) {
	var lines []string
	l := &lineSplitter{line: func(s string) { lines = append(lines, s) }}
	for _, chunk := range []string{"a\nb", "\r", "\nc\rd\r\n\n", "e"} {
		_, _ = l.Write([]byte(chunk))
	}
	l.flush()
	require.Equal(t, []string{"a", "b", "c", "d", "", "e"}, lines)
}

func TestBindingValues(t *testing.T) {
	// What each output binding gets from a response: its Outputs entry;
	// with a "$return" binding, ReturnValue; else a JSON-object ReturnValue
	// merged over the outputs (WorkerFunctionInvoker.HandleOutputDictionary),
	// whose values the host does not base64-decode.
	queue := func(names ...string) *Function {
		fn := &Function{Name: "scan"}
		for _, n := range names {
			fn.Outputs = append(fn.Outputs, QueueOutput{Binding: n, QueueName: "q"})
		}
		return fn
	}
	tests := []struct {
		name string
		fn   *Function
		body string
		want map[string]outputValue
	}{
		{name: "outputs only", fn: queue("operations"),
			body: `{"Outputs":{"operations":[1],"other":[2]},"ReturnValue":3}`,
			want: map[string]outputValue{"operations": {raw: json.RawMessage(`[1]`)}}},
		{name: "object ReturnValue merged over the outputs", fn: queue("operations", "audit"),
			body: `{"Outputs":{"operations":[1],"audit":"a"},"ReturnValue":{"operations":[2],"count":3}}`,
			want: map[string]outputValue{
				"operations": {raw: json.RawMessage(`[2]`), fromReturn: true},
				"audit":      {raw: json.RawMessage(`"a"`)},
				"count":      {raw: json.RawMessage(`3`), fromReturn: true},
			}},
		{name: "a null in ReturnValue takes the output away", fn: queue("operations"),
			body: `{"Outputs":{"operations":[1]},"ReturnValue":{"operations":null}}`,
			want: map[string]outputValue{}},
		{name: "ReturnValue that is no object merges nothing", fn: queue("operations"),
			body: `{"Outputs":{"operations":[1]},"ReturnValue":[{"operations":[2]}]}`,
			want: map[string]outputValue{"operations": {raw: json.RawMessage(`[1]`)}}},
		{name: "null outputs write nothing", fn: queue("operations"),
			body: `{"Outputs":{"operations":null},"ReturnValue":null}`,
			want: map[string]outputValue{}},
		{name: "$return binding takes ReturnValue, not merged", fn: queue("$return", "operations"),
			body: `{"Outputs":{"$return":[9],"operations":[1]},"ReturnValue":{"operations":[2]}}`,
			want: map[string]outputValue{
				"$return":    {raw: json.RawMessage(`{"operations":[2]}`)},
				"operations": {raw: json.RawMessage(`[1]`)},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var result invocationResult
			require.NoError(t, json.Unmarshal([]byte(tt.body), &result))
			got := bindingValues(tt.fn, &result)
			for k, v := range got {
				got[k] = outputValue{raw: json.RawMessage(strings.Join(strings.Fields(string(v.raw)), "")), fromReturn: v.fromReturn}
			}
			require.Equal(t, tt.want, got)
		})
	}

	// A string from ReturnValue is written as it is, one from Outputs
	// base64-decoded when it can be.
	msgs, err := valueMessages(json.RawMessage(`"aGVsbG8="`), false, time.UTC)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("aGVsbG8=")}, msgs)
	msgs, err = valueMessages(json.RawMessage(`"aGVsbG8="`), true, time.UTC)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("hello")}, msgs)
}
