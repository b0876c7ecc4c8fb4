package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Azurite account constants: the well-known development storage account.
const (
	AzuriteAccountName = "devstoreaccount1"
	AzuriteAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Azurite is a running Azurite (Azure Storage emulator), in memory, with
// its blob, queue and table services or its queue service alone.
type Azurite struct {
	// BlobEndpoint, QueueEndpoint and TableEndpoint are the account's service
	// URLs, e.g. "http://127.0.0.1:41234/devstoreaccount1"; empty for a
	// service not started.
	BlobEndpoint  string
	QueueEndpoint string
	TableEndpoint string
	// ConnectionString is the explicit devstoreaccount1 connection string
	// with the started services' endpoints (the Go SDK does not understand
	// UseDevelopmentStorage=true).
	ConnectionString string
	// LogPath is the file that receives Azurite's stdout and stderr.
	LogPath string

	proc *process
	dir  string
}

// azuriteListening matches the line of each service that listens: the
// all-in-one "azurite" and "azurite-queue" word it differently.
var azuriteListening = regexp.MustCompile(`Azurite (Blob|Queue|Table) service (?:is successfully listening at|successfully listens on) (http://\S+)`)

// StartAzurite starts Azurite's blob, queue and table services on 127.0.0.1
// and free ports, installing dev/node_modules first if needed, and returns
// once all of them listen. Call Stop when done.
func StartAzurite(ctx context.Context) (*Azurite, error) {
	return startAzurite(ctx, "azurite", "Blob", "Queue", "Table")
}

// StartAzuriteQueue starts Azurite's queue service alone, as StartAzurite
// does; only QueueEndpoint is set.
func StartAzuriteQueue(ctx context.Context) (*Azurite, error) {
	return startAzurite(ctx, "azurite-queue", "Queue")
}

// startAzurite runs dev/azurite/server.js (Azurite with the project's
// fixes) with one of Azurite's commands serving services.
func startAzurite(ctx context.Context, command string, services ...string) (*Azurite, error) {
	if err := EnsureNodeModules(ctx); err != nil {
		return nil, fmt.Errorf("starting %s: %w", command, err)
	}
	dev, err := devDir()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", command, err)
	}
	// A working directory of its own, in case Azurite writes anything.
	dir, err := os.MkdirTemp("", "opstatus-azurite-")
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", command, err)
	}
	args := []string{
		"node", filepath.Join(dev, "azurite", "server.js"), command,
		"--silent", "--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--disableTelemetry",
	}
	for _, s := range services {
		flag := strings.ToLower(s)
		args = append(args, "--"+flag+"Host", "127.0.0.1", "--"+flag+"Port", "0")
	}
	urls := map[string]string{}
	proc, err := startProcess(ctx, command, dir, args, func(line string) bool {
		if m := azuriteListening.FindStringSubmatch(line); m != nil {
			urls[m[1]] = strings.TrimSuffix(m[2], "/") + "/" + AzuriteAccountName
		}
		return len(urls) == len(services)
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	a := &Azurite{
		BlobEndpoint:  urls["Blob"],
		QueueEndpoint: urls["Queue"],
		TableEndpoint: urls["Table"],
		LogPath:       proc.logPath,
		proc:          proc,
		dir:           dir,
	}
	a.ConnectionString = fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;",
		AzuriteAccountName, AzuriteAccountKey)
	for _, s := range services {
		a.ConnectionString += fmt.Sprintf("%sEndpoint=%s;", s, urls[s])
	}
	return a, nil
}

// Stop ends Azurite and waits for it to exit. Its data is lost.
func (a *Azurite) Stop() error {
	err := a.proc.Stop()
	_ = os.RemoveAll(a.dir)
	return err
}
