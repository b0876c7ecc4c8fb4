package functions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// response is the body of every answer: the host reads the output bindings
// from Outputs, forwards Logs to its own log and keeps ReturnValue for a
// $return binding.
type response struct {
	Outputs     map[string]any `json:"Outputs"`
	Logs        []string       `json:"Logs"`
	ReturnValue any            `json:"ReturnValue"`
}

// encodeResponse renders a response body; Outputs is always an object and
// Logs always an array.
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
	if err := enc.Encode(response{Outputs: outputs, Logs: logs, ReturnValue: ret}); err != nil {
		return nil, fmt.Errorf("encoding response: %w", err)
	}
	return buf.Bytes(), nil
}

// writeLogsOnly answers status with empty Outputs, the given Logs and a null
// ReturnValue; such a body always encodes.
func writeLogsOnly(w http.ResponseWriter, status int, logs []string) {
	body, _ := encodeResponse(nil, logs, nil)
	writeBody(w, status, body)
}

// writeBody sends a rendered response body as application/json.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body) // The caller has gone if this fails; nothing to do.
}
