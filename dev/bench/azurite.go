package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/testenv"
)

// queueServer is the Azurite queue service alone, started by the harness
// with its messages on disk. With --inMemoryPersistence (what dev/testenv
// starts for tests) every message is an extent of its own, and Azurite's
// garbage collector, every 60 s, deletes each unreferenced extent with a
// linear search: after a few thousand messages it stops the whole service
// for tens of seconds, which would be measured as opstatus's own delay.
type queueServer struct {
	ConnectionString string
	cmd              *exec.Cmd
	dir              string
	exited           chan struct{}
	pid              int
}

var queueListening = regexp.MustCompile(`Azurite Queue service (?:is successfully listening at|successfully listens on) (http://\S+)`)

// startQueueServer starts azurite-queue on a free loopback port. inMemory
// selects --inMemoryPersistence, as dev/testenv does.
func startQueueServer(ctx context.Context, inMemory bool, log io.Writer) (*queueServer, error) {
	if err := testenv.EnsureNodeModules(ctx); err != nil {
		return nil, err
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "opstatus-bench-azurite-")
	if err != nil {
		return nil, err
	}
	args := []string{filepath.Join(root, "dev", "node_modules", ".bin", "azurite-queue"),
		"--silent", "--loose", "--skipApiVersionCheck", "--disableTelemetry",
		"--queueHost", "127.0.0.1", "--queuePort", "0"}
	if inMemory {
		args = append(args, "--inMemoryPersistence")
	} else {
		args = append(args, "--location", dir)
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = dir
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting azurite-queue: %w", err)
	}
	q := &queueServer{cmd: cmd, dir: dir, exited: make(chan struct{}), pid: cmd.Process.Pid}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if m := queueListening.FindStringSubmatch(sc.Text()); m != nil && !sent {
				ready <- strings.TrimSuffix(m[1], "/")
				sent = true
			}
			_, _ = fmt.Fprintln(log, "[azurite]", sc.Text())
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(q.exited) }()
	select {
	case url := <-ready:
		endpoint := url + "/" + testenv.AzuriteAccountName
		q.ConnectionString = fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;QueueEndpoint=%s;",
			testenv.AzuriteAccountName, testenv.AzuriteAccountKey, endpoint)
		return q, nil
	case <-q.exited:
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("azurite-queue exited before it listened")
	case <-time.After(30 * time.Second):
		q.stop()
		return nil, fmt.Errorf("azurite-queue did not listen within 30 s")
	case <-ctx.Done():
		q.stop()
		return nil, ctx.Err()
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 5 s) and removes its files.
func (q *queueServer) stop() {
	_ = syscall.Kill(-q.pid, syscall.SIGTERM)
	select {
	case <-q.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-q.pid, syscall.SIGKILL)
		<-q.exited
	}
	_ = os.RemoveAll(q.dir)
}
