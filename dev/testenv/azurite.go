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

// Azurite is a running Azurite (Azure Storage emulator) with its blob, queue
// and table services, in memory.
type Azurite struct {
	// BlobEndpoint, QueueEndpoint and TableEndpoint are the account's service
	// URLs, e.g. "http://127.0.0.1:41234/devstoreaccount1".
	BlobEndpoint  string
	QueueEndpoint string
	TableEndpoint string
	// ConnectionString is the explicit devstoreaccount1 connection string
	// with the three endpoints (the Go SDK does not understand
	// UseDevelopmentStorage=true).
	ConnectionString string
	// LogPath is the file that receives Azurite's stdout and stderr.
	LogPath string

	proc *process
	dir  string
}

var azuriteListening = regexp.MustCompile(`Azurite (Blob|Queue|Table) service is successfully listening at (http://\S+)`)

// StartAzurite starts Azurite on 127.0.0.1 and free ports, installing
// dev/node_modules first if needed, and returns once all its services
// listen. Call Stop when done.
func StartAzurite(ctx context.Context) (*Azurite, error) {
	if err := EnsureNodeModules(ctx); err != nil {
		return nil, fmt.Errorf("starting azurite: %w", err)
	}
	dev, err := devDir()
	if err != nil {
		return nil, fmt.Errorf("starting azurite: %w", err)
	}
	// A working directory of its own, in case Azurite writes anything.
	dir, err := os.MkdirTemp("", "opstatus-azurite-")
	if err != nil {
		return nil, fmt.Errorf("starting azurite: %w", err)
	}
	args := []string{
		filepath.Join(dev, "node_modules", ".bin", "azurite"),
		"--silent", "--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--disableTelemetry",
		"--blobHost", "127.0.0.1", "--blobPort", "0",
		"--queueHost", "127.0.0.1", "--queuePort", "0",
		"--tableHost", "127.0.0.1", "--tablePort", "0",
	}
	urls := map[string]string{}
	proc, err := startProcess(ctx, "azurite", dir, args, func(line string) bool {
		if m := azuriteListening.FindStringSubmatch(line); m != nil {
			urls[m[1]] = strings.TrimSuffix(m[2], "/") + "/" + AzuriteAccountName
		}
		return len(urls) == 3
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
	a.ConnectionString = fmt.Sprintf(
		"DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;QueueEndpoint=%s;TableEndpoint=%s;",
		AzuriteAccountName, AzuriteAccountKey, a.BlobEndpoint, a.QueueEndpoint, a.TableEndpoint)
	return a, nil
}

// Stop ends Azurite and waits for it to exit. Its data is lost.
func (a *Azurite) Stop() error {
	err := a.proc.Stop()
	_ = os.RemoveAll(a.dir)
	return err
}
