package functions

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// upper is a slice type with a marshaling method of its own.
type upper []string

func (u upper) MarshalJSON() ([]byte, error) {
	return json.Marshal(strings.ToUpper(strings.Join(u, ",")))
}

type entry struct {
	ID   string `json:"id"`
	Note string `json:"note,omitempty"`
}

// encodeResponse is the reference: encoding/json's rendering of a whole
// response in one go.
func encodeResponse(outputs map[string]any, logs []string, ret any) ([]byte, error) {
	if outputs == nil {
		outputs = map[string]any{}
	}
	if logs == nil {
		logs = []string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Outputs     map[string]any `json:"Outputs"`
		Logs        []string       `json:"Logs"`
		ReturnValue any            `json:"ReturnValue"`
	}{outputs, logs, ret})
	return buf.Bytes(), err
}

// A body must be the very bytes encoding/json renders at once.
func TestBodyMatchesEncodeResponse(t *testing.T) {
	many := make([]entry, 5000)
	for i := range many {
		many[i] = entry{ID: strings.Repeat("x", i%50)}
	}
	tests := []struct {
		name    string
		outputs map[string]any // what the handler returns
		want    map[string]any // what encoding/json is given; outputs when nil
		logs    []string
		ret     any
	}{
		{name: "nothing"},
		{name: "empty slice", outputs: map[string]any{"operations": []entry{}}, ret: 0},
		{name: "nil slice", outputs: map[string]any{"operations": []entry(nil)}},
		{name: "one", outputs: map[string]any{"operations": []entry{{ID: "a"}}}, logs: []string{"l1"}, ret: 1},
		{name: "html is not escaped", outputs: map[string]any{"o": []entry{{ID: "<a&b>", Note: "\u2028"}}}, ret: "<&>"},
		{name: "several outputs in name order", outputs: map[string]any{"b": []int{1, 2}, "a": map[string]int{"z": 1, "y": 2}, "c": "s"}},
		{name: "bytes stay base64", outputs: map[string]any{"raw": []byte("hello")}},
		{name: "raw JSON stays as it is", outputs: map[string]any{"raw": json.RawMessage(`{"k":[1,2]}`)}},
		{name: "a slice type's own marshaler", outputs: map[string]any{"u": upper{"a", "b"}}},
		{name: "many", outputs: map[string]any{"operations": many}, logs: []string{"a", "b"}, ret: len(many)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				tt.want = tt.outputs
			}
			want, err := encodeResponse(tt.want, tt.logs, tt.ret)
			require.NoError(t, err)
			b, err := newBody(tt.outputs, func() []string { return tt.logs }, tt.ret)
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			require.NoError(t, b.writeTo(rec, http.StatusOK))
			require.Equal(t, string(want), rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		})
	}
}
