package poll

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
)

// FuzzMessageValidate checks the queue message's id rules. Properties:
// Validate never panics; an accepted message has two ids that are non-empty,
// at most maxIDLength bytes of valid UTF-8, neither "." nor "..", with no
// '/', '\', '?', '#', control or space character; a refusal names the field;
// and a message decodes from every host encoding (object, quoted, base64) to
// the same ids and the same verdict. Seeds live in
// testdata/fuzz/FuzzMessageValidate.
func FuzzMessageValidate(f *testing.F) {
	f.Add("0b5f4d52-8b0b-4d57-9a0e-6a4e0a4e0a4e", "op-1")
	f.Add("sub", "a/b")
	f.Fuzz(func(t *testing.T, sub, op string) {
		msg := Message{SubscriptionID: sub, OperationID: op}
		err := msg.Validate()
		if err != nil {
			require.True(t, strings.Contains(err.Error(), "subscriptionId") || strings.Contains(err.Error(), "operationId"), err.Error())
		} else {
			for _, id := range []string{sub, op} {
				require.NotEmpty(t, id)
				require.LessOrEqual(t, len(id), maxIDLength)
				require.True(t, utf8.ValidString(id))
				require.NotEqual(t, ".", id)
				require.NotEqual(t, "..", id)
				require.False(t, strings.ContainsAny(id, `/\?#`), "%q", id)
				require.False(t, strings.ContainsFunc(id, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }), "%q", id)
			}
		}

		if !utf8.ValidString(sub) || !utf8.ValidString(op) {
			return // JSON cannot carry these bytes; the decoder refuses them elsewhere.
		}
		obj, jerr := json.Marshal(msg)
		require.NoError(t, jerr)
		quoted, jerr := json.Marshal(string(obj))
		require.NoError(t, jerr)
		b64, jerr := json.Marshal(base64.StdEncoding.EncodeToString(obj))
		require.NoError(t, jerr)
		for _, raw := range [][]byte{obj, quoted, b64} {
			inv := &functions.Invocation{Data: map[string]json.RawMessage{Binding: raw}}
			var got Message
			require.NoError(t, inv.QueueMessage(Binding, &got), "%s", raw)
			require.Equal(t, msg, got, "%s", raw)
			require.Equal(t, err == nil, got.Validate() == nil)
		}
	})
}
