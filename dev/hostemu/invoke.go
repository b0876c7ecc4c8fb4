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
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
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

// errFunctionTimeout is the cause of an invocation context that ran out of
// functionTimeout.
var errFunctionTimeout = errors.New("function timeout")

// errNoResult is a 2xx answer whose body the host reads as no result at
// all.
var errNoResult = errors.New("the handler answered without a result")

// invocationResult is the body a custom handler answers with.
type invocationResult struct {
	Outputs     map[string]json.RawMessage `json:"Outputs"`
	Logs        []string                   `json:"Logs"`
	ReturnValue json.RawMessage            `json:"ReturnValue"`
}

// invoke runs one invocation: it POSTs data and metadata to the instance's
// handler and, after a 2xx, writes the output bindings; it records the
// invocation and reports whether it succeeded.
//
// Like the host, the invocation ends only once its output bindings are
// written (WorkerFunctionInvoker.InvokeCore awaits BindOutputsAsync), and
// functionTimeout bounds the whole of it (FunctionExecutor.
// InvokeWithTimeoutAsync). An invocation that runs out of time fails, and
// the host kills the handler process and starts a new one
// (WebScriptHostExceptionHandler.OnTimeoutExceptionAsync with the zero
// grace period the script host configures, then HttpFunctionInvocation-
// Dispatcher.RestartWorkerWithInvocationIdAsync). The timeout stops only
// the wait: outputs the host already holds are still written, all of them
// (InvokeWithTimeoutAsync leaves the invocation's task running, and
// FunctionBinding.BindAsyncCollectorAsync's AddAsync calls take no
// cancellation token). A 2xx answer without a result leaves the
// invocation waiting until it times out (see post).
func (in *Instance) invoke(ctx context.Context, fn *Function, data map[string]any, metadata *bindingData, dequeueCount int64) bool {
	h := in.h
	start := time.Now()
	inv := Invocation{Function: fn.Name, Instance: in.index, ID: newUUID(), DequeueCount: dequeueCount, Start: start,
		TraceParent: newTraceParent()}
	if metadata == nil {
		metadata = newBindingData()
		metadata.set("sys", sysBindingData(fn.Name, start))
	}
	timeout := h.opts.InvocationTimeout
	ictx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		ictx, cancel = context.WithTimeoutCause(ctx, timeout, errFunctionTimeout)
	}
	status, result, err := in.post(ictx, fn, inv.ID, inv.TraceParent, map[string]any{"Data": data, "Metadata": metadata})
	inv.Status = status
	if result != nil {
		inv.ReturnValue = result.ReturnValue
	}
	if errors.Is(err, errNoResult) {
		// DefaultHttpWorkerService.ProcessDefaultInvocationRequest sets the
		// invocation's result only when it read one.
		<-ictx.Done()
		err = fmt.Errorf("%w; waited for one until: %w", err, context.Cause(ictx))
	}
	if err == nil {
		// DefaultHttpWorkerService.ProcessLogsFromHttpResponse: the Logs of a
		// 2xx response whose body the host could read, each at Information.
		for _, line := range result.Logs {
			h.log.Info(line, "function", fn.Name, "invocation", inv.ID)
			in.emitLog(LogLine{Level: slog.LevelInfo, Source: SourceLogs, Function: fn.Name, InvocationID: inv.ID, Text: line})
		}
		written := make(chan error, 1)
		in.outputs.Go(func() {
			err := in.writeOutputs(ctx, fn, result)
			written <- err
			if errors.Is(context.Cause(ictx), errFunctionTimeout) {
				h.log.Info("hostemu: outputs written after the invocation timed out", "function", fn.Name,
					"instance", in.index, "invocation", inv.ID, "err", err)
			}
		})
		select {
		case err = <-written:
		case <-ictx.Done():
			err = context.Cause(ictx)
		}
	}
	timedOut := err != nil && errors.Is(context.Cause(ictx), errFunctionTimeout)
	cancel()
	if timedOut {
		err = fmt.Errorf("timeout value of %v exceeded by function %q: %w", timeout, fn.Name, err)
		h.stats.timeouts.Add(1)
		in.restartHandler("function timeout")
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
//
// The request carries the invocation's trace context in a traceparent
// header, as the host's does: DefaultHttpWorkerService sends it with a plain
// HttpClient, whose DiagnosticsHandler (System.Net.Http) injects the W3C
// traceparent of the Activity it starts under the invocation's current
// Activity, which WorkerFunctionInvoker runs the invocation in. The
// payload's Metadata carries no trace context (ScriptInvocationContext-
// Extensions.ToHttpScriptInvocationContext copies only the binding data;
// only the gRPC worker channel sends ScriptInvocationContext.Traceparent).
func (in *Instance) post(ctx context.Context, fn *Function, id, traceparent string, payload any) (int, *invocationResult, error) {
	body, err := marshal(payload)
	if err != nil {
		return 0, nil, fmt.Errorf("encoding the request: %w", err)
	}
	// WorkerFunctionInvoker.InvokeCore waits while the handler (re)starts.
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
	req.Header.Set("traceparent", traceparent)
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
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 {
		var r invocationResult
		if parseErr = json.Unmarshal(raw, &r); parseErr == nil {
			result = &r
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, result, fmt.Errorf("handler answered %s: %s", resp.Status, snippet(raw))
	}
	// The host reads the body with ReadAsAsync, which knows JSON only by
	// its media type, and which reads no result at all from an empty body
	// (HttpContentExtensions.ReadAsAsync without a reader for the media
	// type and BaseJsonMediaTypeFormatter.ReadFromStreamAsync both give
	// null for Content-Length 0) or from a JSON body that is null.
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	isJSON := mt == "application/json" || mt == "text/json"
	if (len(raw) == 0 && resp.ContentLength == 0) || (isJSON && (len(trimmed) == 0 || string(trimmed) == "null")) {
		return resp.StatusCode, nil, fmt.Errorf("%w (%s, body %q)", errNoResult, resp.Status, snippet(raw))
	}
	if !isJSON {
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

// writeOutputs writes the queue output bindings of a successful
// invocation. The bindings are written side by side, the messages of one
// binding one after the other (WorkerFunctionInvoker.BindOutputsAsync
// awaits Task.WhenAll of the bindings; FunctionBinding.
// BindAsyncCollectorAsync awaits one AddAsync per message).
func (in *Instance) writeOutputs(ctx context.Context, fn *Function, result *invocationResult) error {
	values := bindingValues(fn, result)
	var wg sync.WaitGroup
	errs := make([]error, len(fn.Outputs))
	for i := range fn.Outputs {
		o := &fn.Outputs[i]
		v, ok := values[o.Binding]
		if !ok {
			continue
		}
		wg.Go(func() { errs[i] = in.writeBinding(ctx, o, v) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// outputValue is the value a response gives one output binding.
type outputValue struct {
	raw json.RawMessage
	// fromReturn marks a value taken from ReturnValue, which the host does
	// not base64-decode (only Outputs go through GetBindingValue).
	fromReturn bool
}

// bindingValues returns the value of each output binding of a response,
// as the host gathers them: the response's Outputs of the function's
// output bindings (HttpScriptInvocationResultExtensions.
// ToScriptInvocationResult); then, with a "$return" binding, ReturnValue
// as its value (HandleReturnParameter), or else, when ReturnValue is a
// JSON object, each of its properties over the output of the same name
// (WorkerFunctionInvoker.HandleOutputDictionary). Nulls write nothing.
func bindingValues(fn *Function, result *invocationResult) map[string]outputValue {
	values := map[string]outputValue{}
	hasReturn := false
	for _, o := range fn.Outputs {
		if o.Binding == returnBinding {
			hasReturn = true
			continue
		}
		if raw, ok := result.Outputs[o.Binding]; ok && !isJSONNull(raw) {
			values[o.Binding] = outputValue{raw: raw}
		}
	}
	rv := bytes.TrimSpace(result.ReturnValue)
	switch {
	case len(rv) == 0 || isJSONNull(rv):
	case hasReturn:
		values[returnBinding] = outputValue{raw: rv}
	case rv[0] == '{':
		var props map[string]json.RawMessage
		if json.Unmarshal(rv, &props) != nil {
			break
		}
		for name, raw := range props {
			if isJSONNull(raw) {
				delete(values, name)
				continue
			}
			values[name] = outputValue{raw: raw, fromReturn: true}
		}
	}
	return values
}

// returnBinding is the name of a binding that takes the function's return
// value (ScriptConstants.SystemReturnParameterBindingName).
const returnBinding = "$return"

func isJSONNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// writeBinding writes one output binding's messages, each with a request of
// its own (QueuesExtensionConfigProvider.QueueAsyncCollector.AddAsync: no
// batching).
func (in *Instance) writeBinding(ctx context.Context, o *QueueOutput, v outputValue) error {
	h := in.h
	msgs, err := valueMessages(v.raw, o.DataType != "binary" && !v.fromReturn, h.opts.Location)
	if err != nil {
		return fmt.Errorf("output binding %q: %w", o.Binding, err)
	}
	for _, m := range msgs {
		text := encodeMessage(m, h.config.Queues.MessageEncoding)
		if err := h.queues.enqueue(ctx, o.connectionString, o.QueueName, text); err != nil {
			return fmt.Errorf("output binding %q: %w", o.Binding, err)
		}
		h.stats.enqueued.Add(1)
		// QueueAsyncCollector.AddAsync notifies the instance's listeners of
		// the queue after each message (SharedQueueWatcher).
		in.notify(o.QueueName)
	}
	return nil
}

// outputMessages turns an output binding's value into the contents of the
// queue messages the host writes for it:
//
//   - null: none (WorkerFunctionInvoker.BindOutputsAsync skips it);
//   - a string that is valid base64, unless the binding's dataType is
//     binary: its bytes (HttpScriptInvocationResultExtensions.
//     GetBindingValue);
//   - another string that looks like JSON (Utility.IsJson): parsed, and
//     then an array gives one message per element, anything else one
//     message (FunctionBinding.ReadAsEnumerable); a string that does not
//     parse fails the invocation;
//   - an array: one message per element;
//   - anything else: one message.
//
// Each value becomes its ToString() text (FunctionBinding.
// BindAsyncCollectorAsync with the IAsyncCollector<byte[]> the queue
// binding's converters make the default): an object or array is indented
// JSON, a string is its text, a number or a boolean its .NET text ("True"),
// a null element the empty message. The host reads the response with
// Newtonsoft.Json, so a string in the ISO date form is a DateTime by then
// and is written back in Newtonsoft's date form.
func outputMessages(raw json.RawMessage, dataType string, loc *time.Location) ([][]byte, error) {
	return valueMessages(raw, dataType != "binary", loc)
}

// valueMessages is outputMessages for a value that the host base64-decodes
// when it can (decodeBase64) or never does.
func valueMessages(raw json.RawMessage, decodeBase64 bool, loc *time.Location) ([][]byte, error) {
	if loc == nil {
		loc = time.UTC
	}
	v, err := parseJToken(raw, loc)
	if err != nil {
		return nil, err
	}
	if v.kind == jNull {
		return nil, nil
	}
	if v.kind == jString {
		if decodeBase64 {
			if b, ok := dotnetBase64(v.text); ok {
				return [][]byte{b}, nil
			}
		}
		if isJSONText(v.text) {
			if v, err = parseJToken([]byte(v.text), loc); err != nil {
				return nil, fmt.Errorf("the string looks like JSON but is not: %w", err)
			}
		}
	}
	values := []*jtoken{v}
	if v.kind == jArray {
		values = v.items
	}
	msgs := make([][]byte, len(values))
	for i, e := range values {
		msgs[i] = []byte(e.valueText())
	}
	return msgs, nil
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
	return newtonsoftQuote(s)
}

// bindingData is an invocation's binding data as the host keeps it: a
// dictionary whose keys compare case-insensitively, where setting a key
// that is there keeps its first spelling and position. It marshals as the
// invocation's Metadata (ScriptInvocationContextExtensions.
// ToHttpScriptInvocationContext): null values and keys ending in "trigger"
// are left out.
type bindingData struct {
	keys []string
	vals map[string]any // by upper-cased key
}

func newBindingData() *bindingData { return &bindingData{vals: map[string]any{}} }

func (b *bindingData) set(key string, v any) {
	k := strings.ToUpper(key)
	if _, ok := b.vals[k]; !ok {
		b.keys = append(b.keys, key)
	}
	b.vals[k] = v
}

// MarshalJSON writes the Metadata object.
func (b *bindingData) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	for _, key := range b.keys {
		v := b.vals[strings.ToUpper(key)]
		if v == nil || strings.HasSuffix(strings.ToLower(key), "trigger") {
			continue
		}
		enc, err := marshal(v)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		buf.WriteString(newtonsoftQuote(key))
		buf.WriteByte(':')
		buf.Write(enc)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// sysBindingData is the "sys" binding data the WebJobs SDK adds to every
// invocation (SystemBindingData).
func sysBindingData(function string, now time.Time) map[string]any {
	return map[string]any{
		"MethodName": function,
		"UtcNow":     now.UTC().Format(layoutUTC),
		"RandGuid":   newUUID(),
	}
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

// newTraceParent returns a W3C traceparent of a new, sampled trace, as
// .NET writes an Activity's Id (ActivityIdFormat.W3C): version 00, a
// random trace id and span id in lowercase hex, flags 01.
func newTraceParent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("00-%x-%x-01", b[:16], b[16:])
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
