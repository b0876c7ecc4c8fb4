// Package testenv is the project's test support. It starts the local test
// servers (a Cosmos DB REST server and Azurite) as real processes, shares
// them among the tests of a binary ([SharedCosmos], [Main]), lets a test
// declare that it needs them ([NeedsServers], which skips it under
// go test -short), and holds the helpers the test packages share.
//
// The servers are Node.js programs under dev/: dev/cosmosdb/server.js wraps
// @vercel/cosmosdb-server with the fixes the project relies on, and Azurite
// comes from npm. [EnsureNodeModules] installs their packages on first use.
// Server processes never outlive the test binary: on Linux they die with it
// even when it panics or is killed.
package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// RepoRoot returns the repository root: the nearest directory, from the
// working directory up, that holds a go.mod file.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// devDir returns the dev/ directory of the repository.
func devDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "dev"), nil
}

var installMu sync.Mutex

// EnsureNodeModules installs dev/node_modules with `npm ci` when it is
// missing or older than dev/package-lock.json. A file lock serializes the
// install across the test binaries that go test runs in parallel; the first
// install takes about 40 s, later calls only compare two file times.
func EnsureNodeModules(ctx context.Context) error {
	dev, err := devDir()
	if err != nil {
		return err
	}
	installMu.Lock()
	defer installMu.Unlock()

	fresh, err := nodeModulesFresh(dev)
	if err != nil || fresh {
		return err
	}

	// The lock file lives outside node_modules, which npm ci deletes.
	sum := sha256.Sum256([]byte(dev))
	lockPath := filepath.Join(os.TempDir(), "opstatus-npm-"+hex.EncodeToString(sum[:8])+".lock")
	unlock, err := lockFile(ctx, lockPath)
	if err != nil {
		return fmt.Errorf("locking %s: %w", lockPath, err)
	}
	defer unlock()

	// Another process may have installed while we waited for the lock.
	if fresh, err := nodeModulesFresh(dev); err != nil || fresh {
		return err
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dev
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci in %s: %w\n%s", dev, err, out.Bytes())
	}
	return nil
}

// nodeModulesFresh reports whether dev/node_modules holds what
// dev/package-lock.json asks for. npm writes node_modules/.package-lock.json
// last, after a complete install.
func nodeModulesFresh(dev string) (bool, error) {
	lock, err := os.Stat(filepath.Join(dev, "package-lock.json"))
	if err != nil {
		return false, fmt.Errorf("checking node modules: %w", err)
	}
	installed, err := os.Stat(filepath.Join(dev, "node_modules", ".package-lock.json"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking node modules: %w", err)
	}
	return !lock.ModTime().After(installed.ModTime()), nil
}
