package functions

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzQueueMessage feeds arbitrary bytes to the lenient decoders as a
// binding's raw value. Property: nothing panics; when QueueMessage succeeds
// the result is one JSON object; when it fails the error answers 400.
// Seeds live in testdata/fuzz/FuzzQueueMessage.
func FuzzQueueMessage(f *testing.F) {
	f.Add([]byte(`{"subscriptionId":"s","operationId":"o"}`))
	f.Add([]byte(`"eyJzdWJzY3JpcHRpb25JZCI6InMifQ=="`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		md := map[string]json.RawMessage{}
		for _, key := range []string{"Id", "PopReceipt", "DequeueCount", "InsertionTime", "ExpirationTime", "NextVisibleTime"} {
			md[key] = raw
		}
		inv := &Invocation{Data: map[string]json.RawMessage{"operation": raw}, Metadata: md}

		var got json.RawMessage
		err := inv.QueueMessage("operation", &got)
		if err != nil {
			require.Equal(t, http.StatusBadRequest, StatusOf(err))
		} else {
			require.True(t, json.Valid(got), "%q", got)
			require.Equal(t, "an object", kindOf(got), "%q", got)
			var m map[string]any
			require.NoError(t, json.Unmarshal(got, &m))
			require.NotNil(t, m)
		}

		_ = inv.QueueMetadata()
		if _, err := inv.Timer("operation"); err != nil {
			require.Equal(t, http.StatusBadRequest, StatusOf(err))
		}
	})
}

// FuzzDecodeEnvelope checks the request-body decoder. Property: nothing
// panics; on success Data and Metadata are non-nil maps.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"Data":{"operation":"{}"},"Metadata":{"Id":"\"x\""}}`))
	f.Add([]byte(`{"Data":null}`))
	f.Add([]byte(`[[[[]]]]`))
	f.Add([]byte("{\"Data\":{\"x\":\"\xff\"}}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := decodeEnvelope(body)
		if err != nil {
			return
		}
		require.NotNil(t, env.Data)
		require.NotNil(t, env.Metadata)
		for _, v := range env.Data {
			require.True(t, json.Valid(v))
		}
	})
}
