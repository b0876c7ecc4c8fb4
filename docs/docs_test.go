package docs_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/metricnames"
)

// root is the repository, seen from this package's directory.
const root = ".."

// operationsGuide is where an operator looks for settings, metrics and
// alerts.
var operationsGuide = filepath.Join(root, "docs", "operations.md")

// TestSettingsDocumented checks that every setting the handler or the host
// reads for opstatus is named in the operations guide: those internal/config
// and internal/telemetry look up, and those the function.json files name.
func TestSettingsDocumented(t *testing.T) {
	settings := settingsRead(t)
	// A parser that finds nothing would pass vacuously.
	for _, want := range []string{"COSMOS_ENDPOINT", "SCAN_SCHEDULE", "OPERATION_DEADLINE_CREATE", "COSMOS_LEASES_CONTAINER",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "AzureWebJobsStorage"} {
		require.Contains(t, settings, want, "the settings parser no longer finds %s", want)
	}
	guide := read(t, operationsGuide)
	for _, name := range settings {
		require.Truef(t, strings.Contains(guide, "`"+name+"`"), "setting %s is read but docs/operations.md does not name it", name)
	}
}

// TestMetricsDocumented checks that every metric internal/telemetry
// registers is named in the operations guide.
func TestMetricsDocumented(t *testing.T) {
	metrics := metricsRegistered(t)
	require.GreaterOrEqual(t, len(metrics), 5, "the metrics parser finds too few metrics")
	guide := read(t, operationsGuide)
	for _, m := range metrics {
		require.Truef(t, strings.Contains(guide, "`"+m.Name+"`"), "metric %s is registered but docs/operations.md does not name it", m.Name)
	}
}

// TestAlertsNameExistingMetrics checks that each alert of the operations
// guide queries at least one metric, only metrics that exist under their
// Prometheus names, and has its runbook entry; and that no Prometheus name
// anywhere in the documentation is one the handler does not export.
func TestAlertsNameExistingMetrics(t *testing.T) {
	names := prometheusNames(t, metricsRegistered(t))
	guide := read(t, operationsGuide)
	alerts := alertRows(t, section(guide, "## Alerts"))
	require.GreaterOrEqual(t, len(alerts), 5, "docs/operations.md: the Alerts table has too few rows")
	runbook := section(guide, "## Runbook")
	require.NotEmpty(t, runbook, "docs/operations.md has no Runbook section")
	for _, a := range alerts {
		used := promName.FindAllString(a.query, -1)
		require.NotEmpty(t, used, "alert %q queries no opstatus metric: %s", a.name, a.query)
		for _, n := range used {
			require.Contains(t, names, n, "alert %q queries %s, which the handler does not export", a.name, n)
		}
		require.Truef(t, strings.Contains(runbook, "\n### "+a.name+"\n"), "alert %q has no runbook entry (### %s)", a.name, a.name)
	}
	for _, file := range markdownFiles(t) {
		for _, n := range promName.FindAllString(read(t, file), -1) {
			require.Contains(t, names, n, "%s names %s, which the handler does not export", file, n)
		}
	}
}

// TestRelativeLinksResolve checks every relative link of the documentation:
// its file exists and its #fragment, if any, is a heading of the target.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	require.Contains(t, files, filepath.Join(root, "README.md"))
	for _, file := range files {
		for _, target := range links(read(t, file)) {
			if scheme.MatchString(target) {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				_, err := os.Stat(dest)
				require.NoError(t, err, "%s links to %s, which does not exist", file, target)
			}
			if fragment != "" && strings.HasSuffix(dest, ".md") {
				require.Contains(t, anchors(read(t, dest)), fragment, "%s links to %s: no such heading in %s", file, target, dest)
			}
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// markdownFiles are the documents whose links are checked: the top-level
// ones, the guides, and the mesh chart's guide for its owners.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	top, err := filepath.Glob(filepath.Join(root, "*.md"))
	require.NoError(t, err)
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	return append(append(top, guides...), filepath.Join(root, "deploy", "mesh", "README.md"))
}

// settingName is the shape of an app setting: no spaces, no format verbs.
var settingName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.]*$`)

// settingsRead lists the settings looked up in the handler's Go source and
// named by the function.json files.
func settingsRead(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, dir := range []string{"internal/config", "internal/telemetry"} {
		names = append(names, lookups(t, filepath.Join(root, dir))...)
	}
	jsons, err := filepath.Glob(filepath.Join(root, "*", "function.json"))
	require.NoError(t, err)
	require.NotEmpty(t, jsons)
	for _, f := range jsons {
		names = append(names, bindingSettings(t, f)...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// lookups finds the setting names a package's non-test source looks up: the
// first argument of getenv("NAME") and of the methods of a type holding
// getenv (config's reader), the first string after a getenv passed on
// (interval(os.Getenv, "NAME")), and the strings of []string literals that
// name settings (config.PickupSettings).
func lookups(t *testing.T, dir string) []string {
	t.Helper()
	files := parseDir(t, dir)
	readers := map[string]bool{} // methods of types whose fields include getenv
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !holdsGetenv(files, recvType(fn)) {
				continue
			}
			readers[fn.Name.Name] = true
		}
	}
	var names []string
	add := func(e ast.Expr) {
		if s, ok := stringLit(e); ok && settingName.MatchString(s) {
			names = append(names, s)
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if len(n.Args) == 0 {
					return true
				}
				switch name := funcName(n.Fun); {
				case isGetenv(name):
					add(n.Args[0])
				case readers[name] && isSelector(n.Fun):
					add(n.Args[0])
				default:
					for i, a := range n.Args {
						if isGetenv(funcName(a)) {
							for _, rest := range n.Args[i+1:] {
								if _, ok := stringLit(rest); ok {
									add(rest)
									break
								}
							}
						}
					}
				}
			case *ast.ValueSpec:
				for _, v := range n.Values {
					if c, ok := v.(*ast.CompositeLit); ok && isStringSlice(c.Type) {
						for _, e := range c.Elts {
							add(e)
						}
					}
				}
			}
			return true
		})
	}
	return names
}

// bindingSettings lists the settings a function.json names: %NAME% values
// and connections.
func bindingSettings(t *testing.T, path string) []string {
	t.Helper()
	var fj struct {
		Bindings []map[string]any `json:"bindings"`
	}
	require.NoError(t, json.Unmarshal([]byte(read(t, path)), &fj), path)
	var names []string
	for _, b := range fj.Bindings {
		for k, v := range b {
			s, ok := v.(string)
			if !ok {
				continue
			}
			if k == "connection" {
				names = append(names, s)
			}
			for _, m := range percentSetting.FindAllStringSubmatch(s, -1) {
				names = append(names, m[1])
			}
		}
	}
	return names
}

var percentSetting = regexp.MustCompile(`%([A-Za-z0-9_.]+)%`)

func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files, dir)
	return files
}

func recvType(fn *ast.FuncDecl) string {
	e := fn.Recv.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// holdsGetenv reports whether the struct type named name has a field
// called getenv.
func holdsGetenv(files []*ast.File, name string) bool {
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok || ts.Name.Name != name {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return false
				}
				for _, fld := range st.Fields.List {
					for _, n := range fld.Names {
						if isGetenv(n.Name) {
							return true
						}
					}
				}
			}
		}
	}
	return false
}

func funcName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func isSelector(e ast.Expr) bool { _, ok := e.(*ast.SelectorExpr); return ok }

func isGetenv(name string) bool { return name == "getenv" || name == "Getenv" }

func isStringSlice(e ast.Expr) bool {
	a, ok := e.(*ast.ArrayType)
	if !ok || a.Len != nil {
		return false
	}
	id, ok := a.Elt.(*ast.Ident)
	return ok && id.Name == "string"
}

func stringLit(e ast.Expr) (string, bool) {
	l, ok := e.(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil
}

// metricsRegistered finds the instruments internal/telemetry registers.
func metricsRegistered(t *testing.T) []metricnames.Metric {
	t.Helper()
	metrics, err := metricnames.Registered(filepath.Join(root, "internal", "telemetry"))
	require.NoError(t, err)
	return metrics
}

// prometheusNames are the series names the metrics take in Prometheus.
func prometheusNames(t *testing.T, metrics []metricnames.Metric) []string {
	t.Helper()
	names, err := metricnames.PrometheusNames(metrics)
	require.NoError(t, err)
	return names
}

// promName is a Prometheus series name of opstatus's.
var promName = regexp.MustCompile(`\bopstatus_[a-z0-9_]+`)

// section is the text of the level-2 section with the given heading, up to
// the next level-2 heading.
func section(doc, heading string) string {
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(after, "\n## "); i >= 0 {
		after = after[:i]
	}
	return after
}

type alert struct{ name, query string }

// alertRows reads the alert table: its first column is the alert's name,
// its second the query.
func alertRows(t *testing.T, sec string) []alert {
	t.Helper()
	var rows []alert
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := splitRow(line)
		if len(cells) < 2 || strings.Trim(cells[0], "-: ") == "" || cells[0] == "alert" {
			continue
		}
		rows = append(rows, alert{name: cells[0], query: cells[1]})
	}
	return rows
}

// splitRow splits a Markdown table row at the pipes outside code spans.
func splitRow(line string) []string {
	var cells []string
	var cur strings.Builder
	code := false
	for _, r := range strings.Trim(strings.TrimSpace(line), "|") {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var (
	link   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links are the targets of the inline links outside code blocks and spans.
func links(doc string) []string {
	var targets []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(line), -1) {
			targets = append(targets, m[1])
		}
	}
	return targets
}

var codeSpan = regexp.MustCompile("`[^`]*`")

func stripCode(line string) string { return codeSpan.ReplaceAllString(line, "") }

// anchors are the fragments GitHub gives a document's headings: lower
// case, punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(doc string) []string {
	seen := map[string]int{}
	var out []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}
