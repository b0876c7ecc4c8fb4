package functions

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
)

// body is the body of every answer, ready to send: the host reads the
// output bindings from Outputs, forwards Logs to its own log and keeps
// ReturnValue for a $return binding; Outputs is always an object and Logs an
// array. Every part is encoded except the elements of outputs that are plain
// slices: those are encoded as they are written, so that a large output
// (scan's messages) is never held in memory a second time as JSON.
type body struct {
	outputs []encodedOutput // by name, as encoding/json orders map keys
	logs    []byte
	ret     []byte
}

// encodedOutput is one output binding: value is its JSON, or nil when the
// elements of slice are to be encoded on the way out.
type encodedOutput struct {
	name  []byte
	value []byte
	slice reflect.Value
}

// newBody encodes a response's parts, failing before anything is sent.
func newBody(outputs map[string]any, logs []string, ret any) (*body, error) {
	if logs == nil {
		logs = []string{}
	}
	b := &body{}
	var err error
	if b.logs, err = marshal(logs); err != nil {
		return nil, fmt.Errorf("encoding response logs: %w", err)
	}
	if b.ret, err = marshal(ret); err != nil {
		return nil, fmt.Errorf("encoding response return value: %w", err)
	}
	names := make([]string, 0, len(outputs))
	for name := range outputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		o := encodedOutput{}
		if o.name, err = marshal(name); err != nil {
			return nil, fmt.Errorf("encoding output name: %w", err)
		}
		if v := reflect.ValueOf(outputs[name]); streamable(v) {
			o.slice = v
		} else if o.value, err = marshal(outputs[name]); err != nil {
			return nil, fmt.Errorf("encoding output %s: %w", name, err)
		}
		b.outputs = append(b.outputs, o)
	}
	return b, nil
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// streamable reports whether v is a non-nil slice that encoding/json would
// write as an array of its elements: not bytes (base64) and not a type with
// a marshaling method of its own.
func streamable(v reflect.Value) bool {
	if v.Kind() != reflect.Slice || v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 {
		return false
	}
	t := v.Type()
	return !t.Implements(jsonMarshaler) && !t.Implements(textMarshaler) &&
		!reflect.PointerTo(t).Implements(jsonMarshaler) && !reflect.PointerTo(t).Implements(textMarshaler)
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

// writeTo sends the body with status. An element that fails to encode
// part way returns an error after the status has gone out: the caller must
// then abort the response, so that the host sees a failed invocation rather
// than a truncated output.
func (b *body) writeTo(w http.ResponseWriter, status int) error {
	setJSONHeaders(w)
	w.WriteHeader(status)
	bw := bufio.NewWriterSize(w, 32<<10)
	var elem bytes.Buffer
	enc := json.NewEncoder(&elem)
	enc.SetEscapeHTML(false)

	bw.WriteString(`{"Outputs":{`)
	for i, o := range b.outputs {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(o.name)
		bw.WriteByte(':')
		if o.value != nil {
			bw.Write(o.value)
			continue
		}
		bw.WriteByte('[')
		for j := range o.slice.Len() {
			if j > 0 {
				bw.WriteByte(',')
			}
			elem.Reset()
			if err := enc.Encode(o.slice.Index(j).Interface()); err != nil {
				return fmt.Errorf("encoding element %d of output %s: %w", j, o.name, err)
			}
			bw.Write(bytes.TrimSuffix(elem.Bytes(), []byte("\n")))
		}
		bw.WriteByte(']')
	}
	bw.WriteString(`},"Logs":`)
	bw.Write(b.logs)
	bw.WriteString(`,"ReturnValue":`)
	bw.Write(b.ret)
	bw.WriteString("}\n")
	return bw.Flush()
}

// writeLogsOnly answers status with empty Outputs, the given Logs and a null
// ReturnValue; such a body always encodes.
func writeLogsOnly(w http.ResponseWriter, status int, logs []string) {
	b, _ := newBody(nil, logs, nil)
	_ = b.writeTo(w, status) // the caller has gone if this fails; nothing to do
}

func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
}
