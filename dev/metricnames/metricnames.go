// Package metricnames finds the metrics internal/telemetry registers, by
// reading its source, and the series names they take in Prometheus, for
// the tests that hold documentation, alerts and dashboards to metrics that
// exist. It never ships.
package metricnames

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opstatus/opstatus/internal/telemetry"
)

// Metric is one instrument internal/telemetry registers.
type Metric struct {
	// Name is the OpenTelemetry name; Kind is counter (monotonic sums),
	// gauge (gauges and up-down counters) or histogram; Unit is
	// metric.WithUnit's.
	Name, Kind, Unit string
}

// Registered finds the instruments created in the non-test source of the
// directory dir (internal/telemetry): calls of a metric.Meter's instrument
// constructors, with the name (a constant or a literal) and
// metric.WithUnit's unit.
func Registered(dir string) ([]Metric, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	consts := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := stringLit(vs.Values[i]); ok {
							consts[n.Name] = v
						}
					}
				}
			}
		}
	}
	var metrics []Metric
	var bad error
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, isSel := call.Fun.(*ast.SelectorExpr)
			if !isSel {
				return true
			}
			kind := instrumentKind(sel.Sel.Name)
			if kind == "" {
				return true
			}
			name, ok := stringLit(call.Args[0])
			if id, isID := call.Args[0].(*ast.Ident); isID {
				name, ok = consts[id.Name]
			}
			if !ok {
				bad = fmt.Errorf("%s: a %s whose name is neither a literal nor a constant", fset.Position(call.Pos()), kind)
				return true
			}
			m := Metric{Name: name, Kind: kind}
			for _, a := range call.Args[1:] {
				if c, ok := a.(*ast.CallExpr); ok && len(c.Args) == 1 {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "WithUnit" {
						m.Unit, _ = stringLit(c.Args[0])
					}
				}
			}
			metrics = append(metrics, m)
			return true
		})
	}
	return metrics, bad
}

// instrumentKind maps a metric.Meter constructor to the kind of series it
// exports.
func instrumentKind(constructor string) string {
	switch {
	case !strings.HasPrefix(constructor, "Int64") && !strings.HasPrefix(constructor, "Float64"):
		return ""
	case strings.HasSuffix(constructor, "UpDownCounter"), strings.HasSuffix(constructor, "Gauge"):
		return "gauge"
	case strings.HasSuffix(constructor, "Counter"):
		return "counter"
	case strings.HasSuffix(constructor, "Histogram"):
		return "histogram"
	}
	return ""
}

// knownUnits are the units whose Prometheus suffix is known; an annotation
// in braces has none.
var knownUnits = map[string]bool{"": true, "s": true, "ms": true, "By": true, "1": true}

// PrometheusNames are the series names the metrics take in Prometheus, as
// the handler's remote write (telemetry.PrometheusName) and Azure Monitor's
// own translation name them: counters end in _total, histograms give
// _bucket, _sum and _count. A unit with no known suffix is an error.
func PrometheusNames(metrics []Metric) ([]string, error) {
	var names []string
	for _, m := range metrics {
		if !knownUnits[m.Unit] && !(strings.HasPrefix(m.Unit, "{") && strings.HasSuffix(m.Unit, "}")) {
			return nil, fmt.Errorf("metric %s: unit %q has no Prometheus suffix here; add it", m.Name, m.Unit)
		}
		base := telemetry.PrometheusName(m.Name, m.Unit)
		switch m.Kind {
		case "counter":
			names = append(names, strings.TrimSuffix(base, "_total")+"_total")
		case "histogram":
			names = append(names, base+"_bucket", base+"_sum", base+"_count")
		default:
			names = append(names, base)
		}
	}
	return names, nil
}

func stringLit(e ast.Expr) (string, bool) {
	l, ok := e.(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil
}
