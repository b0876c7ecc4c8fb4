package main

import (
	"archive/zip"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

// shipped is what the package of this repository holds, in Core Tools'
// order: the root's files, then each folder's.
var shipped = []string{"handler", "host.json", "pickup/function.json", "poll/function.json", "scan/function.json"}

// coreToolsIgnore is the .funcignore of Core Tools' own GitIgnoreParserTests.
const coreToolsIgnore = `# This is a comment in a .gitignore file!
node_modules
*.log

# Ignore this nonexistent file
nonexistent

# Do not ignore this file
!/nonexistent/foo

# Ignore some files

/baz

foo/*.wat

/test1

test2

# Ignore some deep sub folders
othernonexistent/**/what

# Unignore some other sub folders
!/othernonexistent/**/what/foo


*.swp
`

// TestIgnoreParserMatchesCoreTools runs the cases of Core Tools'
// GitIgnoreParserTests (test/Cli/Func.UnitTests/ParserTests): the port
// decides as the C# parser does, quirks included.
func TestIgnoreParserMatchesCoreTools(t *testing.T) {
	full := parseIgnore(coreToolsIgnore)
	noNegatives := parseIgnore("node_modules")
	tests := []struct {
		parser   *ignoreParser
		path     string
		accepted bool
	}{
		{full, "test/index.js", true},
		{full, "wat/test/index.js", true},
		{full, "/othernonexistent/blah/adsasd/whatads", true},
		{full, "/othernonexistent/blah/adsasd/what/foo", true},
		{noNegatives, "test/index.js", true},
		{noNegatives, "wat/test/index.js", true},
		{full, "test2", false},
		{full, "test1File.wat", true},
		{full, "test.swp", false},
		{full, "node_modules/what.js", false},
		{full, "node_modules/wat.js", false},
		{full, "foo/bar.wat", false},
		{full, "othernonexistent/blah/what", false},
		{noNegatives, "node_modules/wat.js", false},
		{noNegatives, "node_modules/foo", false},
		{full, "nonexistent", false},
		{full, "nonexistent/bar", false},
		{full, "test1", false},
		{noNegatives, "node_modules", false},
		{full, "nonexistent/foo", true},
		{full, "nonexistent/foo/wat", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			require.Equal(t, tt.accepted, tt.parser.accepts(tt.path))
		})
	}
}

// TestFuncignoreShipsOnlyTheApp reads the repository's .funcignore as Core
// Tools does: the handler, host.json and the function.json files go in;
// the Go sources beside function.json, the development tools, the
// infrastructure code and the documents stay out.
func TestFuncignoreShipsOnlyTheApp(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	ignore, err := readIgnore(root)
	require.NoError(t, err)
	require.NotNil(t, ignore)
	tests := []struct {
		path     string
		accepted bool
	}{
		{"handler", true},
		{"host.json", true},
		{"scan/function.json", true},
		{"poll/function.json", true},
		{"pickup/function.json", true},
		{"pickup/pickup.go", false},
		{"poll/poll.go", false},
		{"poll/poll_test.go", false},
		{"scan/scan.go", false},
		{"scan/testdata/operations.json", false},
		{"main.go", false},
		{"go.mod", false},
		{"handler_test.go", false},
		{"Makefile", false},
		{"README.md", false},
		{"local.settings.json.example", false},
		{"functions/testdata/fuzz/FuzzQueueMessage/seed", false},
		{"internal/database/cosmos.go", false},
		{"dev/node_modules/azurite/package.json", false},
		{"dev/package/main.go", false},
		{"deploy/azuredeploy.json", false},
		{"dist/opstatus.zip", false},
		{".ci/run", false},
		// Core Tools lets in whatever starts with a "!" name up to a word
		// boundary: a Windows build of the handler would ship.
		{"handler.exe", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			require.Equal(t, tt.accepted, ignore.accepts(tt.path))
		})
	}
}

// TestRepositoryFiles walks this working tree as Core Tools does: of all
// its files only the app's pass .funcignore, the handler when it is built.
func TestRepositoryFiles(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	ignore, err := readIgnore(root)
	require.NoError(t, err)
	names, err := appFiles(root, ignore)
	require.NoError(t, err)
	want := shipped
	if _, err := os.Stat(filepath.Join(root, "handler")); err != nil {
		want = shipped[1:]
	}
	require.Equal(t, want, names)
}

// writeTree creates the files under dir, each holding its own name.
func writeTree(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(name), 0o644))
	}
}

// copyFromRepo copies the repository's files into dir.
func copyFromRepo(t *testing.T, dir string, names ...string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		require.NoError(t, err)
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
}

func openZip(t *testing.T, pkg []byte) *zip.Reader {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(pkg), int64(len(pkg)))
	require.NoError(t, err)
	return zr
}

func entryNames(zr *zip.Reader) []string {
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	return names
}

func readEntry(t *testing.T, f *zip.File) []byte {
	t.Helper()
	rc, err := f.Open()
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// requireCoreToolsEntry checks what ZipHelper.CreateZip writes for every
// file: made on Unix, a regular file's mode, deflated unless empty, and
// no data descriptor.
func requireCoreToolsEntry(t *testing.T, f *zip.File, executable bool) {
	t.Helper()
	require.Equal(t, uint16(creatorUnix<<8|zipVersion20), f.CreatorVersion, f.Name)
	require.Equal(t, uint16(zipVersion20), f.ReaderVersion, f.Name)
	require.Zero(t, f.Flags&0x8, "%s: data descriptor", f.Name)
	require.Empty(t, f.Extra, f.Name)
	if executable {
		require.Equal(t, uint32(0o100777), f.ExternalAttrs>>16, f.Name)
		require.Equal(t, fs.FileMode(0o777), f.Mode(), f.Name)
	} else {
		require.Equal(t, uint32(0o100666), f.ExternalAttrs>>16, f.Name)
		require.Equal(t, fs.FileMode(0o666), f.Mode(), f.Name)
	}
	if f.UncompressedSize64 == 0 {
		require.Equal(t, zip.Store, f.Method, f.Name)
	} else {
		require.Equal(t, zip.Deflate, f.Method, f.Name)
	}
}

// TestPackageOfAnApp packages an app laid out like this repository, with
// its .funcignore, host.json and function.json files, beside files that
// must not ship: each file .funcignore or Core Tools excludes stays out,
// and what goes in keeps its bytes, its modification time and its mode.
func TestPackageOfAnApp(t *testing.T) {
	dir := t.TempDir()
	copyFromRepo(t, dir, ".funcignore", "host.json", "scan/function.json", "poll/function.json", "pickup/function.json")
	writeTree(t, dir, "handler", "main.go", "go.mod", "README.md", "local.settings.json",
		"poll/poll.go", "poll/testdata/x.json", "scan/scan.go", "scan/.funcignore",
		"dev/node_modules/azurite/package.json", "deploy/azuredeploy.json", "docs/index.md",
		"dist/opstatus.zip", ".git/config", ".vscode/settings.json")
	modified := time.Date(2026, 3, 4, 5, 6, 8, 0, time.Local)
	require.NoError(t, os.Chtimes(filepath.Join(dir, "host.json"), modified, modified))

	pkg, names, err := buildPackage(dir)
	require.NoError(t, err)
	require.Equal(t, shipped, names)
	zr := openZip(t, pkg)
	require.Equal(t, shipped, entryNames(zr))
	for _, f := range zr.File {
		requireCoreToolsEntry(t, f, f.Name == "handler")
		want, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Name)))
		require.NoError(t, err)
		require.Equal(t, want, readEntry(t, f), f.Name)
	}
	// The reader gives the MS-DOS fields' wall clock in UTC.
	require.Equal(t, time.Date(2026, 3, 4, 5, 6, 8, 0, time.UTC), zr.File[1].Modified)
}

// TestCoreToolsSkips packages an app without .funcignore, where Core Tools
// ships every file but the ones it always leaves out, in its order.
func TestCoreToolsSkips(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "host.json"),
		[]byte(`{"customHandler":{"description":{"defaultExecutablePath":"bin/app"}}}`), 0o644))
	writeTree(t, dir, "bin/app", "b.txt", "a/z.txt", "a/b/c.txt", "Local.Settings.json", ".gitignore",
		"sub/.funcignore", "sub/project.lock.json", "sub/.git/HEAD", ".VSCode/launch.json", ".git/config")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))

	pkg, names, err := buildPackage(dir)
	require.NoError(t, err)
	want := []string{"b.txt", "empty", "host.json", "a/z.txt", "a/b/c.txt", "bin/app"}
	require.Equal(t, want, names)
	zr := openZip(t, pkg)
	require.Equal(t, want, entryNames(zr))
	for _, f := range zr.File {
		requireCoreToolsEntry(t, f, f.Name == "bin/app")
	}
}

// TestPackageNeedsItsHandler refuses a package whose custom handler would
// not be in it, or would not be the file marked executable.
func TestPackageNeedsItsHandler(t *testing.T) {
	tests := []struct {
		name    string
		host    string
		files   []string
		wantErr string
	}{
		{name: "not built", host: `{"customHandler":{"description":{"defaultExecutablePath":"handler"}}}`,
			files: []string{"main.go"}, wantErr: `the custom handler "handler" is not in the package`},
		{name: "not a package name", host: `{"customHandler":{"description":{"defaultExecutablePath":"./handler"}}}`,
			files: []string{"handler"}, wantErr: `the custom handler "./handler" is not in the package`},
		{name: "no custom handler", host: `{"version":"2.0"}`,
			files: []string{"handler"}, wantErr: "host.json names no customHandler.description.defaultExecutablePath"},
		{name: "no host.json", files: []string{"handler"}, wantErr: "reading host.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, tt.files...)
			if tt.host != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "host.json"), []byte(tt.host), 0o644))
			}
			_, _, err := buildPackage(dir)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestWritePackageReplacesThePrevious packages an app twice into its own
// folder, where nothing keeps the previous package out: the second
// package holds the app, not the first package.
func TestWritePackageReplacesThePrevious(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "host.json"),
		[]byte(`{"customHandler":{"description":{"defaultExecutablePath":"handler"}}}`), 0o644))
	writeTree(t, dir, "handler")
	out := filepath.Join(dir, "dist", "app.zip")
	for range 2 {
		names, _, err := writePackage(dir, out)
		require.NoError(t, err)
		require.Equal(t, []string{"handler", "host.json"}, names)
	}
	entries, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "app.zip", entries[0].Name())
}

// repositoryPackage is `make package` of this repository, written to a
// temporary folder, with the handler `make build` left at the root.
func repositoryPackage(t *testing.T) (root string, zr *zip.Reader) {
	t.Helper()
	testenv.NeedsServers(t)
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "handler"))
	require.NoError(t, err, "the handler binary is missing (run make build)")
	out := filepath.Join(t.TempDir(), "dist", "opstatus.zip")
	names, size, err := writePackage(root, out)
	require.NoError(t, err)
	require.Equal(t, shipped, names)
	pkg, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, pkg, size)
	return root, openZip(t, pkg)
}

// TestRepositoryPackage checks the package of this repository: the four
// files with Core Tools' modes, and a handler that runs on the Functions
// host's Linux workers: a static linux/amd64 executable built without cgo.
func TestRepositoryPackage(t *testing.T) {
	_, zr := repositoryPackage(t)
	require.Equal(t, shipped, entryNames(zr))
	for _, f := range zr.File {
		requireCoreToolsEntry(t, f, f.Name == "handler")
	}

	bin := readEntry(t, zr.File[0])
	ef, err := elf.NewFile(bytes.NewReader(bin))
	require.NoError(t, err)
	require.Equal(t, elf.EM_X86_64, ef.Machine)
	require.Equal(t, elf.ELFCLASS64, ef.Class)
	require.Equal(t, elf.ET_EXEC, ef.Type)
	for _, p := range ef.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "dynamically linked")
	}
	info, err := buildinfo.Read(bytes.NewReader(bin))
	require.NoError(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	require.Equal(t, "linux", settings["GOOS"])
	require.Equal(t, "amd64", settings["GOARCH"])
	require.Equal(t, "0", settings["CGO_ENABLED"])
}

// TestRepositoryPackageConfiguration checks that the package's host.json
// and function.json files are the repository's, byte for byte.
func TestRepositoryPackageConfiguration(t *testing.T) {
	root, zr := repositoryPackage(t)
	for _, f := range zr.File[1:] {
		want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Name)))
		require.NoError(t, err)
		require.Equal(t, want, readEntry(t, f), f.Name)
	}
}

// TestFolderRemovedDuringTheWalk lists an app one of whose folders is
// removed between the listing of its parent and its own: the walk goes on
// without it.
func TestFolderRemovedDuringTheWalk(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, "host.json", "a/x", "gone/y")
	gone := filepath.Join(dir, "gone")
	readDir = func(p string) ([]fs.DirEntry, error) {
		if p == gone {
			require.NoError(t, os.RemoveAll(gone))
		}
		return os.ReadDir(p)
	}
	t.Cleanup(func() { readDir = os.ReadDir })
	names, err := appFiles(dir, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"host.json", "a/x"}, names)
}
