package main

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Core Tools never packages these file names and never walks into these
// folders, at any depth and whatever their case
// (FileSystemHelpers.GetLocalFiles).
var (
	skippedFiles = []string{".funcignore", ".gitignore", "local.settings.json", "project.lock.json"}
	skippedDirs  = []string{".git", ".vscode"}
)

const (
	// creatorUnix in the high byte of "version made by" tells the unzip
	// on Azure that the external attributes hold a Unix mode; .NET writes
	// it on Linux, and ZipHelper.CreateZip patches it in on Windows.
	creatorUnix = 3
	// zipVersion20 is what .NET writes for a deflated entry, as both the
	// version made by and the version needed to extract.
	zipVersion20 = 20
	// The modes ZipHelper.CreateZip writes: a regular file, 0777 for the
	// custom handler's executable and 0666 for every other file.
	modeExecutable = 0o100777
	modeReadWrite  = 0o100666
	// flagUTF8 marks a name with a character outside printable ASCII, as
	// .NET does.
	flagUTF8 = 0x800
)

// buildPackage returns the deployment package of the function app at
// root, as ZipHelper.GetAppZipFile builds it for a custom handler, and the
// names it holds. Unlike Core Tools, which packages an app whose
// executable is missing, it fails then: such a package cannot start.
func buildPackage(root string) ([]byte, []string, error) {
	ignore, err := readIgnore(root)
	if err != nil {
		return nil, nil, err
	}
	exe, err := customHandlerExecutable(root)
	if err != nil {
		return nil, nil, err
	}
	names, err := appFiles(root, ignore)
	if err != nil {
		return nil, nil, err
	}
	if exe == "" {
		return nil, nil, errors.New("host.json names no customHandler.description.defaultExecutablePath")
	}
	if !slices.Contains(names, exe) {
		return nil, nil, fmt.Errorf("the custom handler %q is not in the package: build it (make build) and let .funcignore ship it", exe)
	}
	var buf bytes.Buffer
	if err := writeZip(&buf, root, names, exe); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), names, nil
}

// readIgnore parses root/.funcignore; without one every file ships, as in
// Core Tools.
func readIgnore(root string) (*ignoreParser, error) {
	b, err := os.ReadFile(filepath.Join(root, ".funcignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading .funcignore: %w", err)
	}
	return parseIgnore(string(b)), nil
}

// customHandlerExecutable returns host.json's
// customHandler.description.defaultExecutablePath, the one name
// ZipHelper.CreateZip marks executable (HostHelpers.GetCustomHandlerExecutable).
// It is compared with entry names as written, so "./handler" would not
// match "handler".
func customHandlerExecutable(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "host.json"))
	if err != nil {
		return "", fmt.Errorf("reading host.json: %w", err)
	}
	var host struct {
		CustomHandler struct {
			Description struct {
				DefaultExecutablePath string `json:"defaultExecutablePath"`
			} `json:"description"`
		} `json:"customHandler"`
	}
	if err := json.Unmarshal(b, &host); err != nil {
		return "", fmt.Errorf("decoding host.json: %w", err)
	}
	return host.CustomHandler.Description.DefaultExecutablePath, nil
}

// appFiles returns the slash-separated names, relative to root, of the
// files that go into the package, in Core Tools' order: a folder's files,
// then each subfolder depth first (FileSystemHelpers.GetFiles). Every
// folder is walked, since a "!" pattern can let in a file of a folder that
// another pattern ignores. .NET lists a folder in the file system's order;
// the names are sorted here so that the package does not depend on it.
func appFiles(root string, ignore *ignoreParser) ([]string, error) {
	var names []string
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		entries, err := readDir(dir)
		if rel != "" && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", dir, err)
		}
		var dirs []string
		for _, e := range entries {
			if isDirectory(filepath.Join(dir, e.Name()), e) {
				if !containsFold(skippedDirs, e.Name()) {
					dirs = append(dirs, e.Name())
				}
				continue
			}
			name := path.Join(rel, e.Name())
			if containsFold(skippedFiles, e.Name()) || (ignore != nil && !ignore.accepts(name)) {
				continue
			}
			names = append(names, name)
		}
		for _, d := range dirs {
			if err := walk(filepath.Join(dir, d), path.Join(rel, d)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	return names, nil
}

// readDir lists a folder. A folder removed while the walk runs (npm ci
// replacing dev/node_modules while other tests run) has no file to ship,
// so appFiles skips it where .NET would fail.
var readDir = os.ReadDir

// isDirectory follows a symbolic link as .NET's directory listing does; a
// broken one counts as a file.
func isDirectory(p string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir()
	}
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}

func containsFold(list []string, name string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.EqualFold(s, name) })
}

// writeZip writes the files as ZipHelper.CreateZip does through .NET's
// ZipArchive: deflated at the default level (stored when empty), the
// file's modification time in local time, Unix modes in the external
// attributes, and sizes and CRC in the local header rather than a data
// descriptor, since .NET writes to a seekable stream.
func writeZip(w io.Writer, root string, names []string, executable string) error {
	zw := zip.NewWriter(w)
	for _, name := range names {
		if err := addFile(zw, filepath.Join(root, filepath.FromSlash(name)), name, name == executable); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("closing the zip: %w", err)
	}
	return nil
}

func addFile(zw *zip.Writer, file, name string, executable bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	info, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	mode := uint32(modeReadWrite)
	if executable {
		mode = modeExecutable
	}
	fh := &zip.FileHeader{
		Name:               name,
		CreatorVersion:     creatorUnix<<8 | zipVersion20,
		ReaderVersion:      zipVersion20,
		Method:             zip.Store,
		CRC32:              crc32.ChecksumIEEE(data),
		UncompressedSize64: uint64(len(data)),
		ExternalAttrs:      mode << 16,
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r > '~' }) {
		fh.Flags |= flagUTF8
	}
	// CreateRaw writes the MS-DOS time fields as given and, unlike setting
	// Modified, adds no extended-timestamp field, which .NET does not write.
	//lint:ignore SA1019 the deprecated fields are the only way to write no extended timestamp
	fh.ModifiedDate, fh.ModifiedTime = msDosTime(info.ModTime())
	body := data
	if len(data) > 0 {
		var c bytes.Buffer
		fw, err := flate.NewWriter(&c, flate.DefaultCompression)
		if err != nil {
			return fmt.Errorf("compressing %s: %w", name, err)
		}
		if _, err := fw.Write(data); err != nil {
			return fmt.Errorf("compressing %s: %w", name, err)
		}
		if err := fw.Close(); err != nil {
			return fmt.Errorf("compressing %s: %w", name, err)
		}
		fh.Method, body = zip.Deflate, c.Bytes()
	}
	fh.CompressedSize64 = uint64(len(body))
	out, err := zw.CreateRaw(fh)
	if err != nil {
		return fmt.Errorf("adding %s: %w", name, err)
	}
	if _, err := out.Write(body); err != nil {
		return fmt.Errorf("adding %s: %w", name, err)
	}
	return nil
}

// msDosTime is .NET's ZipHelper.DateTimeToDosTime: two-second resolution,
// and 1980-01-01 00:00 for a time the format cannot hold.
func msDosTime(t time.Time) (date, clock uint16) {
	if t.Year() < 1980 || t.Year() > 2107 {
		t = time.Date(1980, 1, 1, 0, 0, 0, 0, t.Location())
	}
	date = uint16((t.Year()-1980)<<9 | int(t.Month())<<5 | t.Day())
	clock = uint16(t.Hour()<<11 | t.Minute()<<5 | t.Second()/2)
	return date, clock
}
