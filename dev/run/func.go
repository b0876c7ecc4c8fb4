package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/testenv"
)

// funcStart writes local.settings.json for the running stack and starts the
// real Functions host on the app (make func-start). stop ends it.
func funcStart(ctx context.Context, s *stack.Stack) (stop func(), err error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	settings, err := json.MarshalIndent(map[string]any{"IsEncrypted": false, "Values": s.Settings}, "", "  ")
	if err != nil {
		return nil, err
	}
	// local.settings.json is git-ignored: it holds the emulators' keys.
	if err := os.WriteFile(filepath.Join(root, "local.settings.json"), settings, 0o600); err != nil {
		return nil, err
	}
	log, err := os.CreateTemp("", "opstatus-func-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("func", "start")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("func start: %w", err)
	}
	fmt.Printf("func start running; its log: %s\n", log.Name())
	return func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		log.Close()
	}, nil
}
