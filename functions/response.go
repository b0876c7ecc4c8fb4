package functions

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
)

// Stream is an output binding's array whose elements are produced while the
// answer is written, so that a large output (scan's messages) is never held
// in memory. Each element is encoded as JSON in turn.
//
// The answer's Logs and ReturnValue are encoded after every stream has
// ended: a stream may log through the invocation's Log, and a ReturnValue
// given as a pointer is read then. A stream that yields an error (or
// panics) fails the invocation. The first 32 KiB of an answer are held
// back, so a stream that fails early gets a plain error answer
// (StatusOf(err), the error logged); one that fails after that has its
// response aborted, so that the host never takes a partial output.
type Stream iter.Seq2[any, error]

// holdBack is how much of an answer is kept before its status goes out.
const holdBack = 32 << 10

// writers keeps the answers' buffers: a poll's answer is a few hundred
// bytes, and a fresh 32 KiB buffer per invocation was a large share of
// what the handler allocated (and so of its garbage collection).
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, holdBack) }}

// body is the body of every answer: the host reads the output bindings from
// Outputs, logs each Logs line of a 2xx answer at Information and keeps
// ReturnValue for a $return binding; Outputs is always an object and Logs
// an array.
type body struct {
	outputs []output // by name, as encoding/json orders map keys
	logs    func() []string
	ret     any
}

// output is one output binding: value is its JSON, or stream produces it.
type output struct {
	name   []byte
	value  []byte
	stream Stream
}

// newBody encodes every output but the streams, failing before anything
// is sent. logs is called once the outputs are written.
func newBody(outputs map[string]any, logs func() []string, ret any) (*body, error) {
	b := &body{logs: logs, ret: ret}
	names := make([]string, 0, len(outputs))
	for name := range outputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		o := output{}
		var err error
		if o.name, err = marshal(name); err != nil {
			return nil, fmt.Errorf("encoding output name: %w", err)
		}
		if s, ok := outputs[name].(Stream); ok {
			o.stream, o.value = s, []byte("null") // the value of a nil stream
		} else if o.value, err = marshal(outputs[name]); err != nil {
			return nil, fmt.Errorf("encoding output %s: %w", name, err)
		}
		b.outputs = append(b.outputs, o)
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

// writeTo sends the body with status. On error, sent tells whether the
// status has gone out: if not, the caller may still answer otherwise; if
// so, it must abort the response.
func (b *body) writeTo(w http.ResponseWriter, status int) (sent bool, err error) {
	hw := &heldWriter{w: w, status: status}
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(hw)
	defer func() {
		bw.Reset(nil)
		writers.Put(bw)
	}()
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
		if o.stream == nil {
			bw.Write(o.value)
			continue
		}
		bw.WriteByte('[')
		err := drain(o.stream, func(j int, v any) error {
			if j > 0 {
				bw.WriteByte(',')
			}
			elem.Reset()
			if err := enc.Encode(v); err != nil {
				return fmt.Errorf("encoding element %d: %w", j, err)
			}
			_, err := bw.Write(bytes.TrimSuffix(elem.Bytes(), []byte("\n")))
			return err
		})
		if err != nil {
			return hw.sent, fmt.Errorf("output %s: %w", o.name, err)
		}
		bw.WriteByte(']')
	}
	var logs []string
	if b.logs != nil {
		logs = b.logs()
	}
	if logs == nil {
		logs = []string{}
	}
	encoded, err := marshal(logs)
	if err != nil {
		return hw.sent, fmt.Errorf("encoding response logs: %w", err)
	}
	bw.WriteString(`},"Logs":`)
	bw.Write(encoded)
	if encoded, err = marshal(b.ret); err != nil {
		return hw.sent, fmt.Errorf("encoding response return value: %w", err)
	}
	bw.WriteString(`,"ReturnValue":`)
	bw.Write(encoded)
	bw.WriteString("}\n")
	return true, bw.Flush()
}

// drain calls f with each element of s until s or f fails. A panic in s
// is an error too: s is a handler's code, running outside its invocation.
func drain(s Stream, f func(int, any) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	i := 0
	for v, serr := range s {
		if serr != nil {
			return serr
		}
		if err := f(i, v); err != nil {
			return err
		}
		i++
	}
	return nil
}

// heldWriter sends the headers and status with the first bytes of the body.
type heldWriter struct {
	w      http.ResponseWriter
	status int
	sent   bool
}

func (h *heldWriter) Write(p []byte) (int, error) {
	if !h.sent {
		h.sent = true
		setJSONHeaders(h.w)
		h.w.WriteHeader(h.status)
	}
	return h.w.Write(p)
}

// writeEmpty answers status with empty Outputs and Logs and a null
// ReturnValue; such a body always encodes.
func writeEmpty(w http.ResponseWriter, status int) {
	b := &body{}
	_, _ = b.writeTo(w, status) // the caller has gone if this fails; nothing to do
}

func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
}
