package functions

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type testMessage struct {
	SubscriptionID string `json:"subscriptionId"`
	OperationID    string `json:"operationId"`
}

func TestQueueMessage(t *testing.T) {
	const obj = `{"subscriptionId":"sub-1","operationId":"op-1","unknown":{"x":[1,2]}}`
	want := testMessage{SubscriptionID: "sub-1", OperationID: "op-1"}

	tests := []struct {
		name    string
		data    map[string]json.RawMessage
		binding string // default "operation"
		wantErr string
	}{
		{name: "object", data: data(obj)},
		{name: "string holding JSON", data: data(quote(obj))},
		{name: "doubly quoted", data: data(quote(quote(obj)))},
		{name: "triply quoted", data: data(quote(quote(quote(obj))))},
		{name: "base64 of object", data: data(quote(b64(obj)))},
		{name: "base64 of quoted string", data: data(quote(b64(quote(obj))))},
		{name: "base64 of doubly quoted string", data: data(quote(b64(quote(quote(obj)))))},
		{name: "quoted base64", data: data(quote(quote(b64(obj))))},
		{name: "base64 without padding", data: data(quote(base64.RawStdEncoding.EncodeToString([]byte(obj + " "))))},
		{name: "url-safe base64", data: data(quote(urlSafeB64(t, `{"subscriptionId":"sub-1","operationId":"op-1","x":"???>>>"}`)))},
		{name: "whitespace around object", data: data(" \n\t" + obj + " \r\n")},
		{name: "whitespace inside string", data: data(quote("  \n" + obj + "\n  "))},
		{name: "whitespace around base64", data: data(quote(" " + b64(obj) + "\n"))},
		{name: "base64 of whitespace and object", data: data(quote(b64("\n  " + obj + "\n")))},
		{name: "byte order mark", data: data(quote(b64("\uFEFF" + obj)))},
		{name: "binding name in another case", data: data(obj), binding: "Operation"},

		{name: "missing binding", data: map[string]json.RawMessage{"other": json.RawMessage(obj)}, wantErr: `queue message "operation": binding missing`},
		{name: "null", data: data(`null`), wantErr: "is null, want a JSON object"},
		{name: "empty string", data: data(`""`), wantErr: "holds an empty string"},
		{name: "blank string", data: data(quote("   ")), wantErr: "holds an empty string"},
		{name: "empty raw value", data: data(``), wantErr: "is empty"},
		{name: "number", data: data(`42`), wantErr: "is a number, want a JSON object"},
		{name: "boolean", data: data(`true`), wantErr: "is a boolean"},
		{name: "array", data: data(`[` + obj + `]`), wantErr: "is an array, want a JSON object"},
		{name: "string holding an array", data: data(quote(`[1,2]`)), wantErr: "holds an array"},
		{name: "string holding a number", data: data(quote(`42`)), wantErr: "holds a number"},
		{name: "string holding null", data: data(quote(`null`)), wantErr: "holds null"},
		{name: "invalid base64", data: data(quote("not base64!")), wantErr: "neither JSON nor base64"},
		{name: "base64 of binary", data: data(quote(base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0x00}))), wantErr: "not UTF-8"},
		{name: "base64 of plain text", data: data(quote(b64("hello"))), wantErr: "neither JSON nor base64"},
		{name: "string holding a broken object", data: data(quote(`{"subscriptionId":`)), wantErr: "not a valid JSON object"},
		{name: "string holding trailing data", data: data(quote(obj + ` {}`)), wantErr: "not a valid JSON object"},
		{name: "too deeply nested", data: data(quote(`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`)), wantErr: "nests deeper"},
		{name: "quoted too many times", data: data(nQuote(obj, maxWrapLevels+1)), wantErr: "more than 10 layers"},
		{name: "field of the wrong type", data: data(`{"subscriptionId":5}`), wantErr: "cannot unmarshal number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			binding := tt.binding
			if binding == "" {
				binding = "operation"
			}
			inv := &Invocation{Data: tt.data}
			var got testMessage
			err := inv.QueueMessage(binding, &got)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, http.StatusBadRequest, StatusOf(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

func TestQueueMessageLimitOfQuoting(t *testing.T) {
	const obj = `{"subscriptionId":"s"}`
	inv := &Invocation{Data: data(nQuote(obj, maxWrapLevels))}
	var got testMessage
	require.NoError(t, inv.QueueMessage("operation", &got))
	require.Equal(t, "s", got.SubscriptionID)
}

// urlSafeB64 encodes s in URL-safe base64, which must differ from the
// standard alphabet for the case to mean anything.
func urlSafeB64(t *testing.T, s string) string {
	out := base64.URLEncoding.EncodeToString([]byte(s))
	require.True(t, strings.ContainsAny(out, "-_"), out)
	return out
}

func data(raw string) map[string]json.RawMessage {
	return map[string]json.RawMessage{"operation": json.RawMessage(raw)}
}

func nQuote(s string, n int) string {
	for range n {
		s = quote(s)
	}
	return s
}

func TestQueueMetadata(t *testing.T) {
	inserted := time.Date(2019, 10, 9, 17, 58, 31, 0, time.UTC)
	tests := []struct {
		name     string
		metadata string
		want     QueueMetadata
	}{
		{
			name: "as the host sends it",
			metadata: `{"DequeueCount":1,"ExpirationTime":"2019-10-16T17:58:31+00:00","Id":"\"fa0af3c4-5f1e-4c65-8e06-4a9a1f0e3a1b\"",
				"InsertionTime":"2019-10-09T17:58:31+00:00","NextVisibleTime":"2019-10-09T18:08:32+00:00",
				"PopReceipt":"\"AgAAAAMAAAAAAAAAAgtnj8x+1QE=\"","sys":{"MethodName":"poll","UtcNow":"2019-10-09T17:58:32.8","RandGuid":"x"}}`,
			want: QueueMetadata{
				ID:              "fa0af3c4-5f1e-4c65-8e06-4a9a1f0e3a1b",
				PopReceipt:      "AgAAAAMAAAAAAAAAAgtnj8x+1QE=",
				DequeueCount:    1,
				InsertionTime:   inserted,
				ExpirationTime:  inserted.Add(7 * 24 * time.Hour),
				NextVisibleTime: time.Date(2019, 10, 9, 18, 8, 32, 0, time.UTC),
			},
		},
		{
			name:     "plain strings, count as a string",
			metadata: `{"Id":"abc","PopReceipt":"pr","DequeueCount":"2"}`,
			want:     QueueMetadata{ID: "abc", PopReceipt: "pr", DequeueCount: 2},
		},
		{
			name:     "count as a quoted string",
			metadata: `{"DequeueCount":"\"3\""}`,
			want:     QueueMetadata{DequeueCount: 3},
		},
		{
			name:     "doubly quoted strings",
			metadata: `{"Id":` + quote(quote(quote("abc"))) + `,"DequeueCount":` + quote(quote("4")) + `}`,
			want:     QueueMetadata{ID: "abc", DequeueCount: 4},
		},
		{
			name:     "lowercase keys",
			metadata: `{"id":"\"abc\"","popReceipt":"\"pr\"","dequeueCount":5}`,
			want:     QueueMetadata{ID: "abc", PopReceipt: "pr", DequeueCount: 5},
		},
		{
			name:     "times without zone are UTC",
			metadata: `{"InsertionTime":"2019-10-09T17:58:31","ExpirationTime":"\"2019-10-16T17:58:31\"","NextVisibleTime":"2019-10-09T17:58:31.1234567"}`,
			want: QueueMetadata{
				InsertionTime:   inserted,
				ExpirationTime:  inserted.Add(7 * 24 * time.Hour),
				NextVisibleTime: inserted.Add(123456700 * time.Nanosecond),
			},
		},
		{
			name:     "times with zones are converted to UTC",
			metadata: `{"InsertionTime":"2019-10-09T19:58:31+02:00","ExpirationTime":"\"2019-10-16T17:58:31Z\"","NextVisibleTime":"Wed, 09 Oct 2019 17:58:31 GMT"}`,
			want: QueueMetadata{
				InsertionTime:   inserted,
				ExpirationTime:  inserted.Add(7 * 24 * time.Hour),
				NextVisibleTime: inserted,
			},
		},
		{
			name:     ".NET invariant time",
			metadata: `{"InsertionTime":"10/09/2019 17:58:31 +00:00"}`,
			want:     QueueMetadata{InsertionTime: inserted},
		},
		{
			name:     "odd shapes are zero",
			metadata: `{"Id":{"a":1},"PopReceipt":null,"DequeueCount":"many","InsertionTime":"yesterday","ExpirationTime":42,"NextVisibleTime":[1]}`,
		},
		{name: "count with fraction is zero", metadata: `{"DequeueCount":1.5}`},
		{name: "count as a whole float", metadata: `{"DequeueCount":2.0}`, want: QueueMetadata{DequeueCount: 2}},
		{name: "count too large is zero", metadata: `{"DequeueCount":1e30}`},
		{name: "id as a number", metadata: `{"Id":12}`, want: QueueMetadata{ID: "12"}},
		{name: "empty", metadata: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var md map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(tt.metadata), &md))
			inv := &Invocation{Metadata: md}
			require.Equal(t, tt.want, inv.QueueMetadata())
		})
	}

	t.Run("nil metadata", func(t *testing.T) {
		require.Equal(t, QueueMetadata{}, (&Invocation{}).QueueMetadata())
	})
}

// ReceivedAt is Storage's time of the host's receive: the listener hides
// what it receives for listenerVisibility, and the metadata's
// NextVisibleTime is the receive's.
func TestQueueMetadataReceivedAt(t *testing.T) {
	received := time.Date(2026, 11, 30, 21, 0, 14, 0, time.UTC)
	tests := []struct {
		name     string
		metadata string
		want     time.Time
	}{
		{
			name:     "as the host sends it",
			metadata: `{"InsertionTime":"\"2026-11-30T21:00:10+00:00\"","NextVisibleTime":"\"2026-11-30T21:10:14+00:00\""}`,
			want:     received,
		},
		{
			name:     "received in the second of the insertion",
			metadata: `{"InsertionTime":"2026-11-30T21:00:14+00:00","NextVisibleTime":"2026-11-30T21:10:14+00:00"}`,
			want:     received,
		},
		{
			name:     "rounding puts the receive a second before the insertion",
			metadata: `{"InsertionTime":"2026-11-30T21:00:15+00:00","NextVisibleTime":"2026-11-30T21:10:14+00:00"}`,
			want:     received,
		},
		{
			name:     "without an insertion time",
			metadata: `{"NextVisibleTime":"2026-11-30T21:10:14+00:00"}`,
			want:     received,
		},
		{
			name:     "a receive before the insertion cannot be",
			metadata: `{"InsertionTime":"2026-11-30T21:00:16+00:00","NextVisibleTime":"2026-11-30T21:10:14+00:00"}`,
		},
		{
			name:     "DateTimeOffset.MaxValue: none",
			metadata: `{"InsertionTime":"2026-11-30T21:00:10+00:00","NextVisibleTime":"\"9999-12-31T23:59:59+00:00\""}`,
		},
		{
			name:     "no NextVisibleTime",
			metadata: `{"InsertionTime":"2026-11-30T21:00:10+00:00"}`,
		},
		{
			name:     "unreadable NextVisibleTime",
			metadata: `{"InsertionTime":"2026-11-30T21:00:10+00:00","NextVisibleTime":"soon"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var md map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(tt.metadata), &md))
			require.Equal(t, tt.want, (&Invocation{Metadata: md}).QueueMetadata().ReceivedAt())
		})
	}
}
