package poll

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/database"
)

// cosmosID restates, apart from the code, which ids poll acts on: what
// Cosmos DB stores (non-empty, at most 1,023 bytes of UTF-8, no '/', '\',
// '?', '#'), but "." and "..".
func cosmosID(id string) bool {
	return id != "" && utf8.ValidString(id) && len(id) <= 1023 &&
		id != "." && id != ".." && !strings.ContainsAny(id, `/\?#`)
}

// FuzzMessageValidate checks the queue message's id rules. Properties:
// Validate and CheckIDs never panic; Validate refuses exactly a message with
// an empty id, and CheckIDs refuses whatever Validate refuses, so that what
// scan sends (what CheckIDs accepts) never answers 400; CheckIDs accepts
// exactly the operation ids that cosmosID accepts, with subscription ids that
// cosmosID accepts once lowercased; a refusal names the field; and a message
// decodes from every host encoding (object, quoted, base64) to the same ids
// and the same verdicts. Seeds live in testdata/fuzz/FuzzMessageValidate.
func FuzzMessageValidate(f *testing.F) {
	f.Add("0b5f4d52-8b0b-4d57-9a0e-6a4e0a4e0a4e", "op-1")
	f.Add("sub", "a/b")
	f.Fuzz(func(t *testing.T, sub, op string) {
		msg := Message{SubscriptionID: sub, OperationID: op}
		malformed := msg.Validate()
		unusable := msg.CheckIDs()
		require.Equal(t, sub == "" || op == "", malformed != nil, "%v", malformed)
		if malformed != nil {
			require.Error(t, unusable, "poll answers 400 to what scan could send")
		}

		lowerSub := sub
		if utf8.ValidString(sub) {
			lowerSub = strings.ToLower(sub)
		}
		require.Equal(t, cosmosID(op) && cosmosID(lowerSub), unusable == nil, "%q %q: %v", sub, op, unusable)
		for _, err := range []error{malformed, unusable} {
			if err != nil {
				require.True(t, strings.Contains(err.Error(), "subscriptionId") || strings.Contains(err.Error(), "operationId"), err.Error())
			}
		}
		if unusable != nil {
			require.True(t, errors.Is(unusable, database.ErrInvalidID), unusable.Error())
			require.LessOrEqual(t, len(unusable.Error()), 1000, "the ids are bounded in the error")
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
			require.Equal(t, malformed == nil, got.Validate() == nil)
			require.Equal(t, unusable == nil, got.CheckIDs() == nil)
		}
	})
}
