package functions

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// feed is a change-feed batch as the extension writes it for a string
// parameter: compact array text, documents with Cosmos's system fields, one
// of them of another shape.
const feed = `[{"id":"op-1","partitionKey":"sub","status":"Accepted","_rid":"AAAA","_self":"dbs/x/colls/y/docs/AAAA","_etag":"\"0b00\"","_attachments":"attachments/","_ts":1796126400,"_lsn":12},` +
	`{"id":"op-2","partitionKey":"sub","status":"Provisioning","_ts":1796126401,"_lsn":13},42,"text",null,[1],{}]`

func TestDocuments(t *testing.T) {
	docs := func(raw string) map[string]json.RawMessage {
		return map[string]json.RawMessage{"operations": json.RawMessage(raw)}
	}
	tests := []struct {
		name    string
		data    map[string]json.RawMessage
		binding string // default "operations"
		want    int    // documents
		wantErr string
	}{
		{name: "as the host sends it: quoted twice", data: docs(nQuote(feed, 2)), want: 7},
		{name: "the array itself", data: docs(feed), want: 7},
		{name: "quoted once", data: docs(quote(feed)), want: 7},
		{name: "quoted three times", data: docs(nQuote(feed, 3)), want: 7},
		{name: "base64", data: docs(quote(b64(feed))), want: 7},
		{name: "base64 of the quoted array", data: docs(quote(b64(quote(feed)))), want: 7},
		{name: "indented, whitespace around", data: docs(quote(" \n[\n  {\"id\": \"a\"}\n]\n")), want: 1},
		{name: "byte order mark", data: docs(quote("\uFEFF" + feed)), want: 7},
		{name: "empty batch", data: docs(nQuote(`[]`, 2)), want: 0},
		{name: "binding name in another case", data: docs(nQuote(feed, 2)), binding: "Operations", want: 7},

		{name: "missing binding", data: map[string]json.RawMessage{"other": json.RawMessage(feed)}, wantErr: `documents "operations": binding missing`},
		{name: "null", data: docs(`null`), wantErr: "is null, want a JSON array"},
		{name: "an object", data: docs(`{"id":"a"}`), wantErr: "is an object, want a JSON array"},
		{name: "a string holding an object", data: docs(quote(`{"id":"a"}`)), wantErr: "holds an object, want a JSON array"},
		{name: "a number", data: docs(`7`), wantErr: "is a number"},
		{name: "empty string", data: docs(`""`), wantErr: "holds an empty string, want a JSON array"},
		{name: "a broken array", data: docs(quote(`[{"id":`)), wantErr: "not a valid JSON array"},
		{name: "text after the array", data: docs(quote(`[] []`)), wantErr: "not a valid JSON array"},
		{name: "quoted past the limit", data: docs(nQuote(feed, maxWrapLevels+2)), wantErr: "layers"},
		{name: "nested too deep", data: docs(quote(strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1))), wantErr: "deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			binding := tt.binding
			if binding == "" {
				binding = "operations"
			}
			inv := &Invocation{Data: tt.data}
			got, err := inv.Documents(binding)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, http.StatusBadRequest, StatusOf(err))
				return
			}
			require.NoError(t, err)
			require.Len(t, got, tt.want)
			if tt.want == 7 {
				var first struct{ ID, Status string }
				require.NoError(t, json.Unmarshal(got[0], &first))
				require.Equal(t, "op-1", first.ID)
				require.Equal(t, "Accepted", first.Status)
				require.JSONEq(t, "42", string(got[2]), "documents of other shapes are kept for the caller to judge")
				require.JSONEq(t, "null", string(got[4]))
			}
		})
	}
}

// A batch of thousands of documents, as the host sends it, reads whole and
// in order.
func TestDocumentsThousands(t *testing.T) {
	const n = 5000
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"op-%d","partitionKey":"sub-%d","status":"Accepted","request":"Create","internalId":"/api/aro_hcp/v1alpha1/clusters/c%d","_ts":1796126400}`, i, i%50, i)
	}
	b.WriteByte(']')
	inv := &Invocation{Data: map[string]json.RawMessage{"operations": json.RawMessage(nQuote(b.String(), 2))}}
	got, err := inv.Documents("operations")
	require.NoError(t, err)
	require.Len(t, got, n)
	for i, d := range got {
		var doc struct{ ID string }
		require.NoError(t, json.Unmarshal(d, &doc))
		require.Equal(t, fmt.Sprintf("op-%d", i), doc.ID)
	}
}
