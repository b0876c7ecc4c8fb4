package hostemu

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/opstatus/opstatus/dev/testenv"
	"github.com/stretchr/testify/require"
)

// Shared by the tests of this binary, started on first use.
var (
	azuriteOnce sync.Once
	azurite     *testenv.Azurite
	azuriteErr  error

	handlerOnce sync.Once
	handlerDir  string
	handlerPath string
	handlerErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if azurite != nil {
		if err := azurite.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping azurite:", err)
		}
	}
	if handlerDir != "" {
		_ = os.RemoveAll(handlerDir)
	}
	os.Exit(code)
}

// startAzurite returns the binary's Azurite, starting it on first use.
func startAzurite(t *testing.T) *testenv.Azurite {
	t.Helper()
	azuriteOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		azurite, azuriteErr = testenv.StartAzurite(ctx)
	})
	require.NoError(t, azuriteErr)
	return azurite
}

// fakeHandler builds testdata/fakehandler once and returns its path.
func fakeHandler(t *testing.T) string {
	t.Helper()
	handlerOnce.Do(func() {
		handlerDir, handlerErr = os.MkdirTemp("", "hostemu-fakehandler-")
		if handlerErr != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		handlerPath = filepath.Join(handlerDir, "fakehandler")
		cmd := exec.Command(goBin, "build", "-o", handlerPath, "./testdata/fakehandler")
		if out, err := cmd.CombinedOutput(); err != nil {
			handlerErr = fmt.Errorf("building the fake handler: %w\n%s", err, out)
		}
	})
	require.NoError(t, handlerErr)
	return handlerPath
}

// newApp writes a function app: host.json, the given function.json files
// (function name -> content), and the fake handler linked in as
// "fakehandler" so that host.json can name it by a relative path.
func newApp(t *testing.T, hostJSON string, functions map[string]string) string {
	t.Helper()
	files := map[string]string{"host.json": hostJSON}
	for name, fj := range functions {
		files[filepath.Join(name, "function.json")] = fj
	}
	dir := writeApp(t, files)
	require.NoError(t, os.Symlink(fakeHandler(t), filepath.Join(dir, "fakehandler")))
	return dir
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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
	out  *syncBuffer
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
	r := &running{h: h, rec: &recorder{}, out: &syncBuffer{}}
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
