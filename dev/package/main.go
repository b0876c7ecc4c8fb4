// Command package is `make package`: it writes the deployment package
// dist/opstatus.zip as Azure Functions Core Tools builds it for a
// custom handler (ZipHelper.GetAppZipFile and ZipHelper.CreateZip in
// Azure/azure-functions-core-tools, used by `func pack` and
// `func azure functionapp publish`), so that a pipeline without Core Tools
// deploys the same files with the same modes: the files of the app that
// .funcignore lets in, the custom handler named in host.json with Unix
// mode 0777 and every other file 0666.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the function app's root, which holds host.json and .funcignore")
	out := flag.String("o", "dist/opstatus.zip", "the package to write")
	flag.Parse()
	names, size, err := writePackage(*root, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d bytes, %s\n", *out, size, strings.Join(names, ", "))
}

// writePackage writes the package of the app at root to out and returns
// the names it holds and its size. Like `func pack`, it first removes the
// package a previous run left, which would otherwise be walked as a file
// of the app; it writes the new one whole or not at all.
func writePackage(root, out string) ([]string, int, error) {
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("removing the previous package: %w", err)
	}
	pkg, names, err := buildPackage(root)
	if err != nil {
		return nil, 0, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, 0, fmt.Errorf("creating the package's folder: %w", err)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, pkg, 0o644); err != nil {
		return nil, 0, fmt.Errorf("writing the package: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return nil, 0, fmt.Errorf("writing the package: %w", err)
	}
	return names, len(pkg), nil
}
