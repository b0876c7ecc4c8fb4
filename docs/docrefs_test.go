package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mdName is a Markdown file named in prose: a path of words, dots,
// slashes and dashes ending in .md.
var mdName = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)

// TestGoCommentsNameExistingDocs checks that every .md a Go comment names
// is in the repository, beside the Go file, at the top or in docs/: a
// maintainer sent to a document the repository lacks has nowhere to go.
func TestGoCommentsNameExistingDocs(t *testing.T) {
	var missing []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, group := range f.Comments {
			for _, name := range mdName.FindAllString(group.Text(), -1) {
				if !docExists(filepath.Dir(path), name) {
					missing = append(missing, path+": "+name)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, missing, "Go comments name documents the repository lacks")
}

func docExists(dir, name string) bool {
	name = strings.TrimPrefix(filepath.FromSlash(name), "./")
	for _, base := range []string{dir, root, filepath.Join(root, "docs")} {
		if _, err := os.Stat(filepath.Join(base, name)); err == nil {
			return true
		}
	}
	return false
}
