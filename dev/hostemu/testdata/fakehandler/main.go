// Command fakehandler is a tiny custom handler for the hostemu tests.
//
// GET / answers 200. POST /scan answers 200 with three queue messages in
// Outputs.operations (SCAN_MESSAGES of them when set) and three values of
// other kinds in Outputs.audit on its first call, and empty arrays after
// that; it sleeps SCAN_SLEEP first. With SCAN_LOG set, every scan writes
// lines to stdout and stderr; with SCAN_EXIT set, the first scan exits the
// process with that status; with SCAN_BODY set to "empty", "null" or
// "empty-text", every scan answers 200 with no result (an empty JSON body,
// the JSON null, an empty text/plain body). POST /poll answers 500 when
// the message's operationId starts with "fail", sleeps first when it is
// "sleep:<duration>", prints "fakehandler: poll gate" and waits until the
// file POLL_GATE exists when it is "gate", and answers 200. POST /pickup
// (a Cosmos DB trigger) answers 500 when a document's id starts with
// "fail", prints "fakehandler: pickup gate" and waits for POLL_GATE when
// one is "gate", and answers 200. Every response's ReturnValue echoes the
// request, so that tests see what the host sent. On SIGTERM it prints "fakehandler: SIGTERM", drains and exits
// 0.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("FUNCTIONS_CUSTOMHANDLER_PORT")
	var scans, active atomic.Int64
	var sleep time.Duration
	if s := os.Getenv("SCAN_SLEEP"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakehandler: bad SCAN_SLEEP:", err)
			os.Exit(2)
		}
		sleep = d
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /scan", func(w http.ResponseWriter, r *http.Request) {
		overlap := active.Add(1) > 1
		defer active.Add(-1)
		body, _ := io.ReadAll(r.Body)
		if os.Getenv("SCAN_LOG") != "" {
			fmt.Println("fakehandler: scan on stdout")
			fmt.Fprintln(os.Stderr, "fakehandler: scan on stderr")
			fmt.Fprintln(os.Stderr, "fakehandler: WARNING: scan warns")
			fmt.Fprintln(os.Stderr, "LanguageWorkerConsoleLogfakehandler: for the host")
		}
		first := scans.Add(1) == 1
		if code := os.Getenv("SCAN_EXIT"); code != "" && first {
			n, _ := strconv.Atoi(code)
			os.Exit(n)
		}
		time.Sleep(sleep)
		switch os.Getenv("SCAN_BODY") {
		case "empty":
			w.Header().Set("Content-Type", "application/json")
			return
		case "null":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "null")
			return
		case "empty-text":
			w.Header().Set("Content-Type", "text/plain")
			return
		}
		ops, audit := []any{}, []any{}
		if first {
			ops = []any{
				map[string]string{"subscriptionId": "sub", "operationId": "ok-1"},
				map[string]string{"subscriptionId": "sub", "operationId": "ok-2"},
				map[string]string{"subscriptionId": "sub", "operationId": "fail-1"},
			}
			if n, err := strconv.Atoi(os.Getenv("SCAN_MESSAGES")); err == nil {
				ops = ops[:0]
				for i := range n {
					ops = append(ops, map[string]string{"subscriptionId": "sub", "operationId": "op-" + strconv.Itoa(i)})
				}
			}
			audit = []any{map[string]int{"a": 1}, "plain text", []int{1, 2}}
		}
		reply(w, http.StatusOK, map[string]any{"operations": ops, "audit": audit}, r, body, overlap)
	})
	mux.HandleFunc("POST /poll", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Data map[string]json.RawMessage
		}
		status := http.StatusOK
		if err := json.Unmarshal(body, &req); err != nil {
			status = http.StatusBadRequest
		} else if id := operationID(req.Data["operation"]); strings.HasPrefix(id, "fail") {
			status = http.StatusInternalServerError
		} else if d, ok := strings.CutPrefix(id, "sleep:"); ok {
			if d, err := time.ParseDuration(d); err == nil {
				time.Sleep(d)
			}
		} else if id == "gate" {
			fmt.Println("fakehandler: poll gate")
			for {
				if _, err := os.Stat(os.Getenv("POLL_GATE")); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		reply(w, status, map[string]any{}, r, body, false)
	})

	mux.HandleFunc("POST /pickup", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Data map[string]json.RawMessage
		}
		status := http.StatusOK
		if err := json.Unmarshal(body, &req); err != nil {
			status = http.StatusBadRequest
		}
		for _, raw := range req.Data {
			for _, id := range documentIDs(raw) {
				switch {
				case strings.HasPrefix(id, "fail"):
					status = http.StatusInternalServerError
				case id == "gate":
					fmt.Println("fakehandler: pickup gate")
					for {
						if _, err := os.Stat(os.Getenv("POLL_GATE")); err == nil {
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
			}
		}
		reply(w, status, map[string]any{}, r, body, false)
	})

	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: mux}
	var wg sync.WaitGroup
	wg.Go(func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		<-sigs
		fmt.Println("fakehandler: SIGTERM")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	fmt.Println("fakehandler: listening on", srv.Addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "fakehandler:", err)
		os.Exit(1)
	}
	wg.Wait()
}

// reply answers with a custom-handler response whose ReturnValue echoes
// the request.
func reply(w http.ResponseWriter, status int, outputs map[string]any, r *http.Request, body []byte, overlap bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"Outputs": outputs,
		"Logs":    []string{"fakehandler " + r.URL.Path},
		"ReturnValue": map[string]any{
			"body":         json.RawMessage(body),
			"invocationId": r.Header.Get("X-Azure-Functions-InvocationId"),
			"setting":      os.Getenv("FAKE_SETTING"),
			"pid":          os.Getpid(),
			"overlap":      overlap,
			"targetGroup":  os.Getenv("FUNCTIONS_TARGET_GROUP"),
		},
	})
}

// operationID digs the operationId out of a message that may be quoted
// several times.
func operationID(raw json.RawMessage) string {
	for range 4 {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			break
		}
		raw = json.RawMessage(s)
	}
	var m struct{ OperationID string }
	_ = json.Unmarshal(raw, &m)
	return m.OperationID
}

// documentIDs digs the ids of the documents out of a Cosmos DB trigger's
// value, a JSON array that may be quoted several times.
func documentIDs(raw json.RawMessage) []string {
	for range 4 {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			break
		}
		raw = json.RawMessage(s)
	}
	var docs []struct{ ID string }
	_ = json.Unmarshal(raw, &docs)
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids
}
