package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/opstatus/opstatus/dev/metricnames"
)

// The dashboard is Grafana JSON, as ARO-HCP ships its own
// (observability/grafana-dashboards), over the Azure Monitor workspace's
// Prometheus data source.

const dashboardFile = "observability/opstatus-dashboard.json"

// dashboardRows are the operators' questions, one row each.
var dashboardRows = []string{"Pending operations", "Checks and outcomes", "Cluster Service", "Budget and lock", "Pickup lag"}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query string `json:"query"`
	Regex string `json:"regex"`
}

// servicesDatasources is ARO-HCP's filter for the service clusters' Azure
// Monitor workspaces' data sources (ARO-HCP's Grafana dashboards guide), where
// opstatus's metrics land.
const servicesDatasources = "^Managed_Prometheus_services-.*$"

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// opstatusSeries is a Prometheus series name of opstatus's.
var opstatusSeries = regexp.MustCompile(`\bopstatus_[a-zA-Z0-9_]+`)

// checkDashboard checks that the dashboard has a row for each question,
// that every other panel queries the datasource variable, and that every
// query names only series the handler exports (exported), at least one.
// It returns the queries.
func checkDashboard(b []byte, exported []string) ([]string, error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		return nil, fmt.Errorf("%s: no uid or title", dashboardFile)
	}
	if !slices.Contains(d.Templating.List, variable{Name: "datasource", Type: "datasource", Query: "prometheus", Regex: servicesDatasources}) {
		return nil, fmt.Errorf("%s: no Prometheus datasource variable filtered to the services' workspaces (%s)", dashboardFile, servicesDatasources)
	}
	var rows []string
	var queries []string
	var walk func(ps []panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if p.Type == "row" {
				rows = append(rows, p.Title)
				if err := walk(p.Panels); err != nil {
					return err
				}
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
				return fmt.Errorf("panel %q: no query of the datasource variable", p.Title)
			}
			for _, q := range p.Targets {
				used := opstatusSeries.FindAllString(q.Expr, -1)
				if len(used) == 0 {
					return fmt.Errorf("panel %q: query %s names no opstatus series", p.Title, q.RefID)
				}
				for _, n := range used {
					if !slices.Contains(exported, n) {
						return fmt.Errorf("panel %q: query %s names %s, which the handler does not export", p.Title, q.RefID, n)
					}
				}
				queries = append(queries, q.Expr)
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, r := range dashboardRows {
		if !slices.Contains(rows, r) {
			return nil, fmt.Errorf("%s: no row %q", dashboardFile, r)
		}
	}
	return queries, nil
}

func exportedSeries(t *testing.T) []string {
	t.Helper()
	metrics, err := metricnames.Registered(filepath.Join("..", "internal", "telemetry"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(metrics), 5, "the metrics parser finds too few metrics")
	names, err := metricnames.PrometheusNames(metrics)
	require.NoError(t, err)
	return names
}

// TestDashboardQueriesExportedMetrics checks the dashboard's queries
// against the series the handler exports and, with promtool, their PromQL
// (each as a recording rule).
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	exported := exportedSeries(t)
	queries, err := checkDashboard(b, exported)
	require.NoError(t, err)

	misspelt := strings.Replace(string(b), "opstatus_scan_oldest_seconds", "opstatus_scan_oldest", 1)
	_, err = checkDashboard([]byte(misspelt), exported)
	require.ErrorContains(t, err, "opstatus_scan_oldest, which the handler does not export")
	unfiltered := strings.Replace(string(b), `"regex": "^Managed_Prometheus_services-.*$"`, `"regex": ""`, 1)
	_, err = checkDashboard([]byte(unfiltered), exported)
	require.ErrorContains(t, err, "no Prometheus datasource variable filtered to the services' workspaces")
	noRow := strings.Replace(string(b), `"title": "Pickup lag"`, `"title": "Lag"`, 1)
	_, err = checkDashboard([]byte(noRow), exported)
	require.ErrorContains(t, err, `no row "Pickup lag"`)

	var rules []map[string]string
	for i, q := range queries {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": q})
	}
	doc, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.yaml"), doc, 0o644))
	out, err := promtool(t, dir, "check", "rules", "dashboard.yaml")
	require.NoError(t, err, "promtool check rules on the dashboard's queries:\n%s", out)

	broken := strings.Replace(string(doc), "sum by (outcome)", "sum by outcome", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte(broken), 0o644))
	out, err = promtool(t, dir, "check", "rules", "broken.yaml")
	require.Error(t, err, "promtool passed a query that does not parse:\n%s", out)
}
