package hostemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers the host sends with every invocation (HttpWorkerConstants).
const (
	headerInvocationID = "X-Azure-Functions-InvocationId"
	headerHostVersion  = "X-Azure-Functions-HostVersion"
	// HostVersion is what the emulator reports as the host version.
	HostVersion = "4.0.0-hostemu"
)

// maxResponseBytes bounds a handler response the emulator reads.
const maxResponseBytes = 64 << 20

// Time layouts of Newtonsoft.Json's ISO dates: a DateTime with a zone and
// up to seven fraction digits, a DateTimeOffset that went through
// DateTimeOffset.Parse(ToString()) (whole seconds), and UtcNow.
const (
	layoutDateTime       = "2006-01-02T15:04:05.9999999-07:00"
	layoutDateTimeOffset = "2006-01-02T15:04:05-07:00"
	layoutUTC            = "2006-01-02T15:04:05.9999999Z"
	// dateTimeMin is default(DateTime) as the host writes it.
	dateTimeMin = "0001-01-01T00:00:00"
)

// invocationResult is the body a custom handler answers with.
type invocationResult struct {
	Outputs     map[string]json.RawMessage `json:"Outputs"`
	Logs        []string                   `json:"Logs"`
	ReturnValue json.RawMessage            `json:"ReturnValue"`
}

// invoke POSTs one invocation to the instance's handler, writes the output
// bindings after a 2xx, records it and reports whether it succeeded.
func (in *Instance) invoke(ctx context.Context, fn *Function, data, metadata map[string]any, dequeueCount int64) bool {
	h := in.h
	start := time.Now()
	inv := Invocation{Function: fn.Name, Instance: in.index, ID: newUUID(), DequeueCount: dequeueCount}
	metadata["sys"] = map[string]any{
		"MethodName": fn.Name,
		"UtcNow":     start.UTC().Format(layoutUTC),
		"RandGuid":   newUUID(),
	}
	status, result, err := in.post(ctx, fn, inv.ID, map[string]any{"Data": data, "Metadata": metadata})
	inv.Status = status
	if result != nil {
		inv.ReturnValue = result.ReturnValue
	}
	if err == nil {
		// Like the host, the response's Logs are logged only after a 2xx.
		for _, line := range result.Logs {
			h.log.Info(line, "function", fn.Name, "invocation", inv.ID)
		}
		// Outputs are written only after a 2xx; a failure to write them
		// fails the invocation.
		err = in.writeOutputs(ctx, fn, result)
	}
	inv.Err = err
	inv.Duration = time.Since(start)
	if err != nil {
		h.log.Warn("hostemu: invocation failed", "function", fn.Name, "instance", in.index,
			"invocation", inv.ID, "status", status, "duration", inv.Duration, "err", err)
	} else {
		h.log.Debug("hostemu: invocation succeeded", "function", fn.Name, "instance", in.index,
			"invocation", inv.ID, "status", status, "duration", inv.Duration)
	}
	h.record(inv)
	return err == nil
}

// post sends the request and reads the response. The result is non-nil
// whenever the body was a JSON object, even for a failure status.
func (in *Instance) post(ctx context.Context, fn *Function, id string, payload any) (int, *invocationResult, error) {
	body, err := marshal(payload)
	if err != nil {
		return 0, nil, fmt.Errorf("encoding the request: %w", err)
	}
	if t := in.h.opts.InvocationTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	p, err := in.acquire(ctx)
	if err != nil {
		return 0, nil, err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(p.port) + "/" + fn.Name
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set(headerInvocationID, id)
	req.Header.Set(headerHostVersion, HostVersion)
	req.Header.Set("User-Agent", "Azure-Functions-Host/"+HostVersion)
	resp, err := in.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("calling the handler: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading the response: %w", err)
	}
	if len(raw) > maxResponseBytes {
		return resp.StatusCode, nil, fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	var result *invocationResult
	var parseErr error
	if len(bytes.TrimSpace(raw)) > 0 {
		var r invocationResult
		if parseErr = json.Unmarshal(raw, &r); parseErr == nil {
			result = &r
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, result, fmt.Errorf("handler answered %s: %s", resp.Status, snippet(raw))
	}
	// The host reads the body with ReadAsAsync, which knows JSON only by
	// its media type.
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" && mt != "text/json" {
		return resp.StatusCode, result, fmt.Errorf("response Content-Type %q is not JSON", resp.Header.Get("Content-Type"))
	}
	if parseErr != nil {
		return resp.StatusCode, nil, fmt.Errorf("response body is not a JSON object: %w: %s", parseErr, snippet(raw))
	}
	if result == nil {
		result = &invocationResult{}
	}
	return resp.StatusCode, result, nil
}

// writeOutputs writes the queue output bindings of a successful invocation.
func (in *Instance) writeOutputs(ctx context.Context, fn *Function, result *invocationResult) error {
	h := in.h
	for _, o := range fn.Outputs {
		raw, ok := result.Outputs[o.Binding]
		if !ok {
			continue
		}
		msgs, err := outputMessages(raw, o.DataType)
		if err != nil {
			return fmt.Errorf("output binding %q: %w", o.Binding, err)
		}
		if len(msgs) == 0 {
			continue
		}
		for _, m := range msgs {
			text := encodeMessage(m, h.config.Queues.MessageEncoding)
			if err := h.queues.enqueue(ctx, o.connectionString, o.QueueName, text); err != nil {
				return fmt.Errorf("output binding %q: %w", o.Binding, err)
			}
			h.stats.enqueued.Add(1)
			// As the host's QueueAsyncCollector does after each message
			// (SharedQueueWatcher): a poller of this queue in the same
			// instance that is backing off polls at once.
			in.notify(queueKey{conn: o.connectionString, name: o.QueueName})
		}
	}
	return nil
}

// outputMessages turns an output binding's value into queue messages, as
// the host does: an array is one message per element (strings as they
// are, anything else as its JSON); a lone string is base64-decoded when it
// happens to be valid base64 and the binding is not binary
// (HttpScriptInvocationResultExtensions.GetBindingValue); any other value
// is one message of its JSON.
func outputMessages(raw json.RawMessage, dataType string) ([][]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, err
		}
		msgs := make([][]byte, 0, len(elems))
		for _, e := range elems {
			m, err := messageOf(e)
			if err != nil {
				return nil, err
			}
			if m != nil {
				msgs = append(msgs, m)
			}
		}
		return msgs, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		if dataType != "binary" {
			if b, ok := dotnetBase64(s); ok {
				return [][]byte{b}, nil
			}
		}
		return [][]byte{[]byte(s)}, nil
	default:
		m, err := messageOf(raw)
		if err != nil {
			return nil, err
		}
		return [][]byte{m}, nil
	}
}

// messageOf is one message's content: a string's text, or compact JSON.
// A null element is no message.
func messageOf(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return nil, nil
	}
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dotnetBase64 decodes s like Convert.FromBase64String: white space is
// ignored, padding is required, and "" is valid (zero bytes).
func dotnetBase64(s string) ([]byte, bool) {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, s)
	if len(s)%4 != 0 {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	return b, true
}

// encodeMessage is the text written to the queue for content m.
func encodeMessage(m []byte, encoding string) string {
	if encoding == EncodingBase64 {
		return base64.StdEncoding.EncodeToString(m)
	}
	return string(m)
}

// decodeMessage is the content of a message's text.
func decodeMessage(text, encoding string) ([]byte, error) {
	if encoding == EncodingBase64 {
		b, ok := dotnetBase64(text)
		if !ok {
			return nil, errors.New("the message is not valid base64 (extensions.queues.messageEncoding is base64)")
		}
		return b, nil
	}
	return []byte(text), nil
}

// marshal encodes v as JSON without HTML escaping, like Newtonsoft.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// jsonString is s serialized as a JSON string, as JsonConvert.SerializeObject
// does for a string.
func jsonString(s string) string {
	b, _ := marshal(s)
	return string(b)
}

// snippet shortens a response body for an error message.
func snippet(b []byte) string {
	const max = 300
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
