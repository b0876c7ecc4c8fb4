package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// stageApp copies the function app (host.json, every <function>/function.json
// and the handler binary) from the repository root into a directory of its
// own, so that every run of one invocation uses the same handler even if
// ./handler is rebuilt meanwhile. It returns the directory and the
// handler's SHA-256.
func stageApp(root string) (dir, sum string, err error) {
	dir, err = os.MkdirTemp("", "opstatus-bench-app-")
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := copyFile(filepath.Join(root, "host.json"), filepath.Join(dir, "host.json"), 0o644); err != nil {
		return "", "", err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", "", err
	}
	for _, e := range entries {
		fj := filepath.Join(root, e.Name(), "function.json")
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(fj); err != nil {
			continue
		}
		if err := os.Mkdir(filepath.Join(dir, e.Name()), 0o755); err != nil {
			return "", "", err
		}
		if err := copyFile(fj, filepath.Join(dir, e.Name(), "function.json"), 0o644); err != nil {
			return "", "", err
		}
	}
	if err := copyFile(filepath.Join(root, "handler"), filepath.Join(dir, "handler"), 0o755); err != nil {
		return "", "", fmt.Errorf("the handler binary (run make build): %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "handler"))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", err
	}
	return dir, hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// gitCommit returns the repository's HEAD commit, or "" (read only).
func gitCommit(root string) string {
	cmd := exec.Command("git", "rev-parse", "--short=12", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// parseBatch reads a queue batch written "batchSize+newBatchThreshold".
func parseBatch(s string) (batchSize, threshold int, err error) {
	b, t, ok := strings.Cut(s, "+")
	if ok {
		batchSize, err = strconv.Atoi(strings.TrimSpace(b))
	}
	if ok && err == nil {
		threshold, err = strconv.Atoi(strings.TrimSpace(t))
	}
	if !ok || err != nil || batchSize < 1 || batchSize > 32 || threshold < 0 {
		return 0, 0, fmt.Errorf("%q: want batchSize+newBatchThreshold, batchSize 1 to 32 (the host's range), newBatchThreshold 0 or more", s)
	}
	return batchSize, threshold, nil
}

// setBatch rewrites the staged host.json in dir with extensions.queues
// batchSize and newBatchThreshold from batch ("8+4").
func setBatch(dir, batch string) error {
	size, threshold, err := parseBatch(batch)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "host.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ext, _ := doc["extensions"].(map[string]any)
	if ext == nil {
		ext = map[string]any{}
		doc["extensions"] = ext
	}
	queues, _ := ext["queues"].(map[string]any)
	if queues == nil {
		queues = map[string]any{}
		ext["queues"] = queues
	}
	queues["batchSize"], queues["newBatchThreshold"] = size, threshold
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
