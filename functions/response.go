package functions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// body is the body of every answer: the host reads the output bindings from
// Outputs, logs each Logs line of a 2xx answer at Information and keeps
// ReturnValue for a $return binding; Outputs is always an object and Logs
// an array.
type body struct {
	outputs []output // by name, as encoding/json orders map keys
	logs    func() []string
	ret     []byte
}

// output is one output binding and its JSON.
type output struct {
	name, value []byte
}

// newBody encodes the outputs and the return value, so that an answer that
// cannot be encoded fails before anything is sent. logs is called when the
// answer is written.
func newBody(outputs map[string]any, logs func() []string, ret any) (*body, error) {
	b := &body{logs: logs}
	names := make([]string, 0, len(outputs))
	for name := range outputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		var o output
		var err error
		if o.name, err = marshal(name); err != nil {
			return nil, fmt.Errorf("encoding output name: %w", err)
		}
		if o.value, err = marshal(outputs[name]); err != nil {
			return nil, fmt.Errorf("encoding output %s: %w", name, err)
		}
		b.outputs = append(b.outputs, o)
	}
	var err error
	if b.ret, err = marshal(ret); err != nil {
		return nil, fmt.Errorf("encoding the return value: %w", err)
	}
	return b, nil
}

// marshal is json.Marshal without HTML escaping, which the host's logs
// and messages need no more than JSON does.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// writeTo sends the body with status. An error means the host has gone.
func (b *body) writeTo(w http.ResponseWriter, status int) error {
	var logs []string
	if b.logs != nil {
		logs = b.logs()
	}
	if logs == nil {
		logs = []string{}
	}
	encodedLogs, err := marshal(logs) // strings: cannot fail
	if err != nil {
		return err
	}
	ret := b.ret
	if ret == nil {
		ret = []byte("null")
	}
	var buf bytes.Buffer
	buf.WriteString(`{"Outputs":{`)
	for i, o := range b.outputs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(o.name)
		buf.WriteByte(':')
		buf.Write(o.value)
	}
	buf.WriteString(`},"Logs":`)
	buf.Write(encodedLogs)
	buf.WriteString(`,"ReturnValue":`)
	buf.Write(ret)
	buf.WriteString("}\n")
	setJSONHeaders(w)
	w.WriteHeader(status)
	_, err = w.Write(buf.Bytes())
	return err
}

// writeEmpty answers status with empty Outputs and Logs and a null
// ReturnValue.
func writeEmpty(w http.ResponseWriter, status int) {
	_ = (&body{}).writeTo(w, status) // the caller has gone if this fails; nothing to do
}

func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
}
