// Package functions implements the Azure Functions custom-handler protocol:
// the Functions host POSTs one JSON envelope per invocation to
// /<function>, and the handler answers with a JSON object holding the
// output bindings, log lines and a return value.
//
// The package owns everything that touches the wire: envelope and trigger
// payload decoding (lenient, because the host's encodings vary), the router,
// per-invocation logging, error-to-status mapping and the server lifecycle
// (graceful drain on shutdown). Function packages only implement Handler.
package functions
