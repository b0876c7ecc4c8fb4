package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ARM stands in for the endpoints behind operations' notificationUri: it
// records each operation status POSTed to it and answers 200, or the
// status set by SetStatus. The zero value is ready to serve.
type ARM struct {
	mu       sync.Mutex
	received []Notification
	status   int
	hold     chan struct{}
	arrived  chan struct{}
}

// Notification is one operation status ARM received.
type Notification struct {
	// Path is the path of the notification URI.
	Path string
	// Raw is the body as sent; Body is the same, decoded.
	Raw  []byte
	Body map[string]any
	// At is when it arrived.
	At time.Time
}

// ServeHTTP records a notification. A body that is not a JSON object is
// answered 400 and not recorded.
func (a *ARM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var body map[string]any
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.received = append(a.received, Notification{Path: r.URL.Path, Raw: raw, Body: body, At: time.Now()})
	status, hold, arrived := a.status, a.hold, a.arrived
	a.mu.Unlock()
	if hold != nil {
		arrived <- struct{}{}
		<-hold
	}
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
}

// Received returns the notifications so far, in the order they arrived.
func (a *ARM) Received() []Notification {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Notification(nil), a.received...)
}

// Bodies returns the bodies of the notifications so far.
func (a *ARM) Bodies() []map[string]any {
	var out []map[string]any
	for _, n := range a.Received() {
		out = append(out, n.Body)
	}
	return out
}

// SetStatus sets the status later notifications are answered with.
func (a *ARM) SetStatus(code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status = code
}

// Hold makes each later notification, once recorded, send on arrived and
// wait until release is called, so that a test can act while a delivery
// is in flight. release may be called more than once.
func (a *ARM) Hold() (arrived <-chan struct{}, release func()) {
	hold, arrivals := make(chan struct{}), make(chan struct{}, 1)
	a.mu.Lock()
	a.hold, a.arrived = hold, arrivals
	a.mu.Unlock()
	var once sync.Once
	return arrivals, func() { once.Do(func() { close(hold) }) }
}

// WriteNotFound answers 404 with body, as something in front of Cluster
// Service (a router, an ingress) may: with contentType, or with no
// Content-Type at all when contentType is "-".
func WriteNotFound(w http.ResponseWriter, contentType, body string) {
	if contentType == "-" {
		w.Header()["Content-Type"] = nil // no sniffing either
	} else {
		w.Header().Set("Content-Type", contentType)
	}
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, body)
}

// The levels the Functions host logs a custom handler's lines at.
const (
	HostInformation = "Information"
	HostWarning     = "Warning"
	HostError       = "Error"
)

// HostStderrLevel is the level the host logs a line of the handler's
// stderr at: Warning when it contains "warn" in any case, Error otherwise
// (WorkerProcess.ParseErrorMessageAndLog). It logs stdout lines, and the
// Logs of a 2xx answer, at Information; the Logs of any other answer not
// at all.
func HostStderrLevel(line string) string {
	if strings.Contains(strings.ToLower(line), "warn") {
		return HostWarning
	}
	return HostError
}
