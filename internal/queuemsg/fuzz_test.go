package queuemsg_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/opstatus/opstatus/internal/queuemsg"
)

// FuzzDecode: whatever arrives, Decode answers without panicking; what it
// accepts names at most MaxOperations operations, each with non-empty ids
// or an error of its own; and the usable ones survive scan's batching and a
// second decoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"subscriptionId":"s","operationId":"o"}`,
		`{"operations":[{"subscriptionId":"a","operationId":"1"},7,{"subscriptionId":5}],"scannedAt":"2026-12-01T12:00:00Z"}`,
		`{"operations":[]}`, `{}`, `[]`, `null`, `{"operations":null,"subscriptionId":"s","operationId":"o"}`,
		"{\n  \"operations\": [\n    {\n      \"subscriptionId\": \"a\",\n      \"operationId\": \"1\"\n    }\n  ]\n}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := queuemsg.Decode(b)
		if err != nil {
			return
		}
		if len(r.Entries) == 0 || len(r.Entries) > queuemsg.MaxOperations {
			t.Fatalf("%d entries accepted", len(r.Entries))
		}
		var usable []queuemsg.Operation
		for _, e := range r.Entries {
			if e.Err != nil {
				continue
			}
			if e.SubscriptionID == "" || e.OperationID == "" {
				t.Fatalf("an entry without ids and without an error: %+v", e)
			}
			usable = append(usable, e.Operation)
		}
		var again []queuemsg.Operation
		for _, m := range queuemsg.Batches(usable, time.Unix(0, 0)) {
			out, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := queuemsg.Decode(out)
			if err != nil {
				t.Fatalf("scan's own message refused: %v: %s", err, out)
			}
			for _, e := range r2.Entries {
				if e.Err != nil {
					t.Fatalf("scan's own entry refused: %v", e.Err)
				}
				again = append(again, e.Operation)
			}
		}
		if len(again) != len(usable) {
			t.Fatalf("%d operations after a round trip, %d before", len(again), len(usable))
		}
		for i := range again {
			if again[i] != usable[i] {
				t.Fatalf("operation %d changed: %+v -> %+v", i, usable[i], again[i])
			}
		}
	})
}
