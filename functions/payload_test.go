package functions

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// quote returns s as a JSON string literal.
func quote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestDecodeEnvelope(t *testing.T) {
	tests := []struct {
		name         string
		body         string
		wantErr      string
		wantData     map[string]string
		wantMetadata map[string]string
	}{
		{
			name:         "data and metadata",
			body:         `{"Data":{"operation":{"a":1}},"Metadata":{"Id":"\"x\"","DequeueCount":1}}`,
			wantData:     map[string]string{"operation": `{"a":1}`},
			wantMetadata: map[string]string{"Id": `"\"x\""`, "DequeueCount": `1`},
		},
		{
			name:         "whitespace, other keys and lowercase names",
			body:         " \n{\"data\":{\"t\":null},\"metadata\":{},\"Other\":[1]}\t",
			wantData:     map[string]string{"t": `null`},
			wantMetadata: map[string]string{},
		},
		{
			name:         "upper-case names",
			body:         `{"DATA":{"operation":"x"},"METADATA":{"Id":"1"}}`,
			wantData:     map[string]string{"operation": `"x"`},
			wantMetadata: map[string]string{"Id": `"1"`},
		},
		{name: "null data and metadata", body: `{"Data":null,"Metadata":null}`, wantData: map[string]string{}, wantMetadata: map[string]string{}},
		{name: "empty object", body: `{}`, wantData: map[string]string{}, wantMetadata: map[string]string{}},
		{name: "empty body", body: "", wantErr: "request body is empty"},
		{name: "blank body", body: " \n ", wantErr: "request body is empty"},
		{name: "not JSON", body: "hello", wantErr: "not valid JSON"},
		{name: "truncated", body: `{"Data":{`, wantErr: "not valid JSON"},
		{name: "trailing data", body: `{"Data":{}} x`, wantErr: "not valid JSON"},
		{name: "array", body: `[{"Data":{}}]`, wantErr: "request body is an array"},
		{name: "string", body: `"{}"`, wantErr: "request body is a string"},
		{name: "null", body: `null`, wantErr: "request body is null"},
		{name: "invalid UTF-8", body: "{\"Data\":{\"x\":\"\xff\"}}", wantErr: "not valid UTF-8"},
		{name: "too deep", body: `{"Data":{"x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`, wantErr: "nests deeper than 64"},
		{name: "data not an object", body: `{"Data":"x"}`, wantErr: "Data is a string, want a JSON object"},
		{name: "metadata not an object", body: `{"Metadata":[1]}`, wantErr: "Metadata is an array, want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := decodeEnvelope([]byte(tt.body))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantData, rawStrings(env.Data))
			require.Equal(t, tt.wantMetadata, rawStrings(env.Metadata))
		})
	}
}

func rawStrings(m map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func TestCheckDepth(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
	}{
		{name: "flat", in: `{"a":1}`},
		{name: "exactly the limit", in: strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)},
		{name: "one over the limit", in: strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), wantErr: true},
		{name: "mixed objects and arrays over the limit", in: strings.Repeat(`{"a":[`, maxDepth/2+1), wantErr: true},
		{name: "brackets inside strings do not count", in: `{"a":"` + strings.Repeat("[{", 100) + `"}`},
		{name: "escaped quote keeps the string open", in: `{"a":"\"` + strings.Repeat("[", 100) + `"}`},
		{name: "escaped backslash closes the string", in: `{"a":"\\"` + strings.Repeat("[", 100) + `}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDepth([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestLenientScalars(t *testing.T) {
	tests := []struct {
		raw      string
		wantText string
		wantInt  int64
		wantBool bool
	}{
		{raw: `"abc"`, wantText: "abc"},
		{raw: `"\"abc\""`, wantText: "abc"},
		{raw: quote(quote(quote("abc"))), wantText: "abc"},
		{raw: ` "  abc  " `, wantText: "abc"},
		{raw: `7`, wantText: "7", wantInt: 7},
		{raw: `"7"`, wantText: "7", wantInt: 7},
		{raw: `"\"7\""`, wantText: "7", wantInt: 7},
		{raw: `7.0`, wantText: "7.0", wantInt: 7},
		{raw: `7.5`, wantText: "7.5"},
		{raw: `1e300`, wantText: "1e300"},
		{raw: `-9223372036854775808`, wantText: "-9223372036854775808", wantInt: -9223372036854775808},
		{raw: `9223372036854775808`, wantText: "9223372036854775808"},
		{raw: `true`, wantText: "true", wantBool: true},
		{raw: `"True"`, wantText: "True", wantBool: true},
		{raw: `"\"false\""`, wantText: "false"},
		{raw: `null`},
		{raw: `""`},
		{raw: ``},
		{raw: `{"a":1}`},
		{raw: `[1]`},
		{raw: `"\"broken`, wantText: ""},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			require.Equal(t, tt.wantText, lenientText([]byte(tt.raw)))
			require.Equal(t, tt.wantInt, lenientInt([]byte(tt.raw)))
			require.Equal(t, tt.wantBool, lenientBool([]byte(tt.raw)))
		})
	}
}

// hostQueueEnvelope is the shape of the body the host POSTs for a queue
// message (string form, metadata as the host serializes it).
const hostQueueEnvelope = `{"Data":{"operation":"\"{\\\"subscriptionId\\\":\\\"2b2c1b4e-5d55-4a1e-9c1c-3f0e6f1d2a11\\\",\\\"operationId\\\":\\\"0d9f3a52-8f0e-4a44-9a7e-1b7c2f6d5e40\\\",\\\"scannedAt\\\":\\\"2026-11-30T21:00:10Z\\\",\\\"scanInterval\\\":10}\""},` +
	`"Metadata":{"DequeueCount":"1","ExpirationTime":"\"2026-12-07T21:00:10+00:00\"","Id":"\"8f2a1c3e-1d4b-4c55-9e0f-2b3a4c5d6e7f\"",` +
	`"InsertionTime":"\"2026-11-30T21:00:10+00:00\"","NextVisibleTime":"\"2026-11-30T21:10:10+00:00\"","PopReceipt":"\"AgAAAAMAAAAAAAAAq3yY6Ptm2wE=\"",` +
	`"sys":{"MethodName":"poll","UtcNow":"2026-11-30T21:00:10.1234567Z","RandGuid":"6c1f1e5a-2b3c-4d5e-8f9a-0b1c2d3e4f5a"}}}`

// BenchmarkDecodeEnvelope is the decoding every invocation starts with.
func BenchmarkDecodeEnvelope(b *testing.B) {
	body := []byte(hostQueueEnvelope)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeEnvelope(body); err != nil {
			b.Fatal(err)
		}
	}
}
