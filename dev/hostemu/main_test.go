package hostemu

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// newApp writes a function app: host.json, the given function.json files
// (function name -> content), and the fake handler, built once, linked in
// as "fakehandler" so that host.json can name it by a relative path. The
// host runs it as a server, on real timers, for seconds a test: such tests
// are skipped under -short.
func newApp(t *testing.T, hostJSON string, functions map[string]string) string {
	t.Helper()
	handler := testenv.Build(t, "./dev/hostemu/testdata/fakehandler")
	files := map[string]string{"host.json": hostJSON}
	for name, fj := range functions {
		files[filepath.Join(name, "function.json")] = fj
	}
	dir := writeApp(t, files)
	require.NoError(t, os.Symlink(handler, filepath.Join(dir, "fakehandler")))
	return dir
}

// recorder keeps the invocations the host reports.
type recorder struct {
	mu     sync.Mutex
	events []Invocation
}

func (r *recorder) add(inv Invocation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, inv)
}

func (r *recorder) of(function string) []Invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Invocation
	for _, e := range r.events {
		if e.Function == function {
			out = append(out, e)
		}
	}
	return out
}

// running is a host started by runHost.
type running struct {
	h    *Host
	rec  *recorder
	out  *testenv.SyncBuffer
	stop func() error
	// finished is closed when Run has returned runErr.
	finished chan struct{}
	runErr   error
}

// runHost loads appDir, applies opts and runs the host until stop is
// called (or the test ends). The handlers' output and the host's log go to
// out, which the test log shows when the test fails or HOSTEMU_TEST_LOG is
// set.
func runHost(t *testing.T, appDir string, settings map[string]string, opts Options) *running {
	t.Helper()
	h, err := Load(appDir, settings)
	require.NoError(t, err)
	r := &running{h: h, rec: &recorder{}, out: &testenv.SyncBuffer{}}
	opts.Output = r.out
	opts.Logger = slog.New(slog.NewTextHandler(r.out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if f := opts.OnInvocation; f != nil {
		opts.OnInvocation = func(inv Invocation) { r.rec.add(inv); f(inv) }
	} else {
		opts.OnInvocation = r.rec.add
	}
	h.Options = opts

	ctx, cancel := context.WithCancel(context.Background())
	r.finished = make(chan struct{})
	go func() {
		r.runErr = h.Run(ctx)
		close(r.finished)
	}()
	r.stop = func() error {
		cancel()
		select {
		case <-r.finished:
			return r.runErr
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("Run did not return within 2 minutes")
		}
	}
	t.Cleanup(func() {
		_ = r.stop()
		if t.Failed() || os.Getenv("HOSTEMU_TEST_LOG") != "" {
			t.Logf("host output:\n%s", r.out.String())
		}
	})
	return r
}
