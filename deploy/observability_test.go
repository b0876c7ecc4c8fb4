package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The alerts live in observability/ as ARO-HCP keeps its own: a
// PrometheusRule and a promtool test file beside it. promtool reads rule
// groups, not the CRD, so the tests hand it the CRD's spec under the file
// name the test file names (as ARO-HCP's generator does).

const (
	rulesFile     = "observability/opstatus-prometheusRule.yaml"
	rulesTestFile = "observability/opstatus-prometheusRule_test.yaml"
	opsGuide      = "../docs/operations.md"
)

// prometheusRule is the part of a PrometheusRule the deployment uses. Its
// decoding is strict: a key Azure would not carry is an error.
type prometheusRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Groups []ruleGroup `yaml:"groups"`
	} `yaml:"spec"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// readRules decodes the PrometheusRule at path and checks what ARO-HCP's
// generator requires of each alert.
func readRules(path string) (prometheusRule, error) {
	var pr prometheusRule
	b, err := os.ReadFile(path)
	if err != nil {
		return pr, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pr); err != nil {
		return pr, fmt.Errorf("%s: %w", path, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		return pr, fmt.Errorf("%s: %s %s, not a monitoring.coreos.com/v1 PrometheusRule", path, pr.APIVersion, pr.Kind)
	}
	if len(pr.Spec.Groups) == 0 {
		return pr, fmt.Errorf("%s: no rule groups", path)
	}
	alertName := regexp.MustCompile(`^[A-Z][A-Za-z0-9]+$`)
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			switch {
			case !alertName.MatchString(r.Alert):
				return pr, fmt.Errorf("%s: alert %q: not a PascalCase alert name (recording rules have no place here)", path, r.Alert)
			case strings.TrimSpace(r.Expr) == "":
				return pr, fmt.Errorf("%s: alert %s has no expr", path, r.Alert)
			case !slices.Contains([]string{"2", "2.5", "3", "4"}, r.Labels["severity"]):
				return pr, fmt.Errorf("%s: alert %s: severity %q is not an IcM severity 2, 2.5, 3 or 4", path, r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					return pr, fmt.Errorf("%s: alert %s has no %s annotation", path, r.Alert, a)
				}
			}
		}
	}
	return pr, nil
}

func (pr prometheusRule) alerts() []rule {
	var out []rule
	for _, g := range pr.Spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// promtoolPath is the promtool the Makefile installs at its pinned version
// ($PROMTOOL), or one on PATH. Without one the promtool tests skip, and
// fail when CI=true.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p, _ = exec.LookPath("promtool")
	}
	if p == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no promtool: run the tests through `make test`, which installs it at its pinned version, or set PROMTOOL")
		}
		t.Skip("no promtool: `make test` installs it at its pinned version (or set PROMTOOL)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("PROMTOOL=%s: %v", p, err)
	}
	return p
}

// promtoolDir lays out, in a new directory, the rule groups of the
// PrometheusRule (its spec) under the rule file's name and the test file
// beside them, edited by edit when it is not nil.
func promtoolDir(t *testing.T, edit func(rules string) string) string {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var doc struct {
		Spec yaml.Node `yaml:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	spec, err := yaml.Marshal(&doc.Spec)
	require.NoError(t, err)
	rules := string(spec)
	if edit != nil {
		edited := edit(rules)
		require.NotEqual(t, rules, edited, "the edit changed nothing")
		rules = edited
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(rulesFile)), []byte(rules), 0o644))
	tests, err := os.ReadFile(rulesTestFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(rulesTestFile)), tests, 0o644))
	return dir
}

func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtoolPath(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPrometheusRulesPass checks the rules with promtool and runs their
// unit tests.
func TestPrometheusRulesPass(t *testing.T) {
	_, err := readRules(rulesFile)
	require.NoError(t, err)
	dir := promtoolDir(t, nil)
	out, err := promtool(t, dir, "check", "rules", filepath.Base(rulesFile))
	require.NoError(t, err, "promtool check rules:\n%s", out)
	out, err = promtool(t, dir, "test", "rules", filepath.Base(rulesTestFile))
	require.NoError(t, err, "promtool test rules:\n%s", out)
	t.Logf("promtool test rules:\n%s", out)
}

// TestPrometheusRulesBrokenCopiesFail runs the unit tests on copies of the
// rules with one alert each broken: each must fail.
func TestPrometheusRulesBrokenCopiesFail(t *testing.T) {
	for _, tc := range []struct{ name, alert, old, new string }{
		{"create threshold", "OpstatusClusterCreatePending", "> 1200", "> 12000"},
		{"other pending misses node pools", "OpstatusOperationPending", `opstatus_scan_oldest_seconds{request="Create",resource_type!="cluster"}`, `opstatus_scan_oldest_seconds{request="Create",resource_type="cluster"}`},
		{"no scan by absence only", "OpstatusNoScan", "absent_over_time(opstatus_scan_timestamp_seconds[3m]) or time() - max by (cluster) (opstatus_scan_timestamp_seconds) > 180", "absent_over_time(opstatus_scan_timestamp_seconds[3m])"},
		{"no scan on the pending gauge", "OpstatusNoScan", "absent_over_time(opstatus_scan_timestamp_seconds[3m])", "absent_over_time(opstatus_scan_pending[3m])"},
		{"cluster service errors", "OpstatusClusterServiceDegraded", `status_code=~"0|429|5.."`, `status_code=~"5.."`},
		{"deferred without for", "OpstatusDeferredRising", "for: 15m", "for: 1m"},
		{"past deadline first increment", "OpstatusPastDeadline", "(opstatus_operations_past_deadline_total > 0 unless opstatus_operations_past_deadline_total offset 1h)", "vector(0) > 1"},
		{"skips window", "OpstatusScanSkipped", "[15m]", "[30m]"},
		{"refused first increment", "OpstatusCosmosRefused", "(opstatus_cosmos_refused_total > 0 unless opstatus_cosmos_refused_total offset 15m)", "vector(0) > 1"},
		{"refused summed over containers", "OpstatusCosmosRefused", "increase(opstatus_cosmos_refused_total[15m]) > 0", "sum(increase(opstatus_cosmos_refused_total[15m])) > 0"},
		{"severity", "OpstatusNoScan", `severity: "2.5"`, `severity: "2"`},
		{"starved without for", "OpstatusBudgetStarved", "for: 3m", "for: 1m"},
		{"starved on demand alone", "OpstatusBudgetStarved", "max_over_time(opstatus_budget_demand[1m]) > 0 and max_over_time(opstatus_budget_permits[1m]) == 0", "max_over_time(opstatus_budget_demand[1m]) > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := promtoolDir(t, func(rules string) string { return strings.Replace(rules, tc.old, tc.new, 1) })
			out, err := promtool(t, dir, "test", "rules", filepath.Base(rulesTestFile))
			require.Error(t, err, "promtool test rules passed a broken copy:\n%s", out)
			require.Contains(t, out, "alertname: "+tc.alert, "the broken copy fails, but not on %s's expectations", tc.alert)
		})
	}
}

// ruleTests is the part of a promtool test file the coverage check reads.
type ruleTests struct {
	Tests []struct {
		AlertRuleTest []alertTest `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

type alertTest struct {
	Alertname string `yaml:"alertname"`
	ExpAlerts []any  `yaml:"exp_alerts"`
}

// TestPrometheusRulesTestedBothWays checks that the test file shows each
// alert firing and not firing, and has one test where no alert fires at
// all (a healthy deployment).
func TestPrometheusRulesTestedBothWays(t *testing.T) {
	pr, err := readRules(rulesFile)
	require.NoError(t, err)
	b, err := os.ReadFile(rulesTestFile)
	require.NoError(t, err)
	var rt ruleTests
	require.NoError(t, yaml.Unmarshal(b, &rt))
	fires, quiet := map[string]bool{}, map[string]bool{}
	healthy := false
	for _, tc := range rt.Tests {
		silent := map[string]bool{}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
				silent[a.Alertname] = true
			}
		}
		all := true
		for _, r := range pr.alerts() {
			all = all && silent[r.Alert]
		}
		healthy = healthy || all && !slices.ContainsFunc(tc.AlertRuleTest, func(a alertTest) bool { return len(a.ExpAlerts) > 0 })
	}
	for _, r := range pr.alerts() {
		require.Truef(t, fires[r.Alert], "%s: no test shows %s firing", rulesTestFile, r.Alert)
		require.Truef(t, quiet[r.Alert], "%s: no test shows %s not firing", rulesTestFile, r.Alert)
	}
	require.True(t, healthy, "%s: no test of a healthy deployment in which every alert stays quiet", rulesTestFile)
}

// TestPrometheusRulesMatchOperationsGuide checks that the alerts are the
// operations guide's: each row of its Alerts table is the rule whose
// summary is its name, with its query as the expression and its duration
// as the rule's for.
func TestPrometheusRulesMatchOperationsGuide(t *testing.T) {
	pr, err := readRules(rulesFile)
	require.NoError(t, err)
	rows, err := guideAlerts(opsGuide)
	require.NoError(t, err)
	require.NoError(t, matchGuide(pr.alerts(), rows))

	broken := slices.Clone(pr.alerts())
	broken[0].Expr = strings.Replace(broken[0].Expr, "1200", "1300", 1)
	require.Error(t, matchGuide(broken, rows), "an expression that differs from the guide's passed")
	require.Error(t, matchGuide(pr.alerts()[1:], rows), "a guide alert with no rule passed")
}

// guideAlert is a row of the operations guide's Alerts table.
type guideAlert struct{ name, query, duration string }

// guideAlerts reads the Alerts table of the guide: name, PromQL (in
// a code span, with the pipes escaped), and "for N minutes" when it has
// one.
func guideAlerts(path string) ([]guideAlert, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	_, sec, ok := strings.Cut(string(b), "\n## Alerts\n")
	if !ok {
		return nil, fmt.Errorf("%s: no Alerts section", path)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	row := regexp.MustCompile("^\\| ([^|]+) \\| `(.+)`(?:, for (\\d+) minutes)? \\|$")
	var rows []guideAlert
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| alert ") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s: Alerts row %q is not | name | `PromQL`[, for N minutes] |", path, line)
		}
		d := ""
		if m[3] != "" {
			d = m[3] + "m"
		}
		rows = append(rows, guideAlert{name: m[1], query: strings.ReplaceAll(m[2], `\|`, "|"), duration: d})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: the Alerts table has no rows", path)
	}
	return rows, nil
}

func matchGuide(rules []rule, rows []guideAlert) error {
	bySummary := map[string]rule{}
	for _, r := range rules {
		bySummary[r.Annotations["summary"]] = r
	}
	if len(rules) != len(rows) {
		return fmt.Errorf("%d alert rules, %d alerts in the guide", len(rules), len(rows))
	}
	for _, g := range rows {
		r, ok := bySummary[g.name]
		switch {
		case !ok:
			return fmt.Errorf("the guide's alert %q is no rule's summary in %s", g.name, rulesFile)
		case strings.Join(strings.Fields(r.Expr), " ") != g.query:
			return fmt.Errorf("rule %s: expression\n  %s\nbut the guide has\n  %s", r.Alert, strings.Join(strings.Fields(r.Expr), " "), g.query)
		case r.For != g.duration:
			return fmt.Errorf("rule %s: for %q, but the guide has %q", r.Alert, r.For, g.duration)
		}
	}
	return nil
}
