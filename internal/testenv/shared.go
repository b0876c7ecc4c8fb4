package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NeedsServers skips the test under go test -short. A test that needs a
// local server (the Node.js servers under dev/, the built handler, or the
// host emulator running either) calls it first, or gets its server from a
// helper that calls it (SharedCosmos, SharedAzurite, Build): -short runs
// the unit tests alone, without Node.js and in well under a minute.
func NeedsServers(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs local servers (Node.js or the built handler); -short runs the unit tests only")
	}
}

// sharedStartTimeout bounds the start of a shared server, npm ci included.
const sharedStartTimeout = 5 * time.Minute

// lazy is a value made on first use and shared by the tests of a binary.
type lazy[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (l *lazy[T]) get(start func() (T, error)) (T, error) {
	l.once.Do(func() { l.v, l.err = start() })
	return l.v, l.err
}

// shared holds what the helpers below started for the tests of this test
// binary; Main stops and removes it all.
var shared struct {
	mu       sync.Mutex
	cosmos   map[CosmosOptions]*lazy[*Cosmos]
	azurite  lazy[*Azurite]
	binaries map[string]*lazy[string]
	binDir   lazy[string]
	cleanups []func() error
	logs     []string
}

// atExit registers cleanup for Main to run, and the log file of a server
// for Main to name when a test fails.
func atExit(logPath string, cleanup func() error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.cleanups = append(shared.cleanups, cleanup)
	if logPath != "" {
		shared.logs = append(shared.logs, logPath)
	}
}

// SharedCosmos returns the https Cosmos test server that the tests of this
// test binary share, started on first use. It skips the test under -short
// and fails it when the server cannot start. The package's TestMain calls
// Main, which stops the server. Tests keep apart by using databases of
// their own (see NewDatabase and DatabaseName).
func SharedCosmos(t testing.TB) *Cosmos {
	t.Helper()
	return sharedCosmos(t, CosmosOptions{})
}

// SharedPlainCosmos is SharedCosmos for a second server, which serves
// plain http.
func SharedPlainCosmos(t testing.TB) *Cosmos {
	t.Helper()
	return sharedCosmos(t, CosmosOptions{PlainHTTP: true})
}

func sharedCosmos(t testing.TB, opts CosmosOptions) *Cosmos {
	t.Helper()
	return startShared(t, "Cosmos test server", lazyIn(&shared.cosmos, opts), func(ctx context.Context) (*Cosmos, error) {
		return StartCosmos(ctx, opts)
	})
}

// SharedAzurite returns the Azurite (blob, queue and table services) that
// the tests of this test binary share, started on first use; like
// SharedCosmos, it skips the test under -short and Main stops it.
func SharedAzurite(t testing.TB) *Azurite {
	t.Helper()
	return startShared(t, "Azurite", &shared.azurite, StartAzurite)
}

// server is what startShared starts.
type server interface {
	Stop() error
	logFile() string
}

func (c *Cosmos) logFile() string  { return c.LogPath }
func (a *Azurite) logFile() string { return a.LogPath }

// startShared returns l's server, which start starts on first use and
// Main stops. It skips t under -short, and fails it when the server cannot
// start (every later call fails the same way, without trying again).
func startShared[S server](t testing.TB, what string, l *lazy[S], start func(context.Context) (S, error)) S {
	t.Helper()
	NeedsServers(t)
	s, err := l.get(func() (S, error) {
		ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
		defer cancel()
		s, err := start(ctx)
		if err == nil {
			atExit(s.logFile(), s.Stop)
		}
		return s, err
	})
	if err != nil {
		t.Fatalf("shared %s: %v", what, err)
	}
	return s
}

// lazyIn returns the value of *m at key, adding it on first use.
func lazyIn[K comparable, T any](m *map[K]*lazy[T], key K) *lazy[T] {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if *m == nil {
		*m = map[K]*lazy[T]{}
	}
	l := (*m)[key]
	if l == nil {
		l = &lazy[T]{}
		(*m)[key] = l
	}
	return l
}

// Build builds the main package pkg, a path relative to the repository
// root such as "." (the handler), without cgo, once per test binary, and
// returns the path of the executable; Main removes it. A pkg directory with
// a go.mod of its own is built in its own module. What tests build is
// a server they run (the handler, a fake of it), so Build, like
// SharedCosmos, skips the test under -short.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	NeedsServers(t)
	path, err := lazyIn(&shared.binaries, pkg).get(func() (string, error) { return build(pkg) })
	if err != nil {
		t.Fatalf("building %s: %v", pkg, err)
	}
	return path
}

func build(pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := shared.binDir.get(func() (string, error) {
		dir, err := os.MkdirTemp("", "opstatus-testbin-")
		if err == nil {
			atExit("", func() error { return os.RemoveAll(dir) })
		}
		return dir, err
	})
	if err != nil {
		return "", err
	}
	name := strings.Trim(strings.ReplaceAll(filepath.ToSlash(filepath.Clean(pkg)), "/", "-"), ".-")
	if name == "" {
		name = "handler"
	}
	out := filepath.Join(dir, name)
	// go test puts its own toolchain's bin first on PATH.
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if _, err := os.Stat(filepath.Join(root, pkg, "go.mod")); err == nil {
		cmd.Args[len(cmd.Args)-1], cmd.Dir = ".", filepath.Join(root, pkg)
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, b)
	}
	return out, nil
}

// Run starts the program at path (one Build returned) with args, waits
// until ready accepts a line of its stdout, and stops it when t ends. Its
// stdout and stderr go to a log file that an error names.
func Run(t testing.TB, path string, args []string, ready func(line string) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	p, err := startProcess(ctx, filepath.Base(path), "", append([]string{path}, args...), ready)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("%v; log %s", err, p.logPath)
		}
	})
}

// Main is the TestMain body of a package whose tests use SharedCosmos,
// SharedAzurite or Build: it runs the tests, names the shared servers' log
// files when one failed, then stops the servers and removes the binaries.
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
func Main(m interface{ Run() int }) int {
	code := m.Run()
	shared.mu.Lock()
	cleanups, logs := shared.cleanups, shared.logs
	shared.cleanups, shared.logs = nil, nil
	shared.mu.Unlock()
	if code != 0 && len(logs) > 0 {
		fmt.Fprintf(os.Stderr, "server logs: %s\n", strings.Join(logs, " "))
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		if err := cleanups[i](); err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
		}
	}
	return code
}
