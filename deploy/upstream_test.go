package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/stretchr/testify/require"
)

// checkDependencies checks that every dependsOn names a resource its own
// template declares. ARM drops a dependency on a declared resource whose
// condition is false, but refuses one on a resource outside the template
// ("The resource '…' is not defined in the template").
func checkDependencies(d *armeval.Deployment) error {
	for _, r := range d.Resources {
		deps, _ := r.Body["dependsOn"].([]any)
		for _, dep := range deps {
			s, _ := dep.(string)
			if !declaredIn(d.Declared[r.Template], s) {
				return fmt.Errorf("%s depends on %q, which its template does not declare: ARM refuses the deployment (the resource is not defined in the template)", r.Name, s)
			}
		}
	}
	return nil
}

// declaredIn reports whether dep, a resource ID or a name (type/name, or
// the name alone) as dependsOn takes them, is among ids.
func declaredIn(ids map[string]bool, dep string) bool {
	dep = strings.ToLower(dep)
	if dep == "" {
		return false
	}
	if ids[dep] {
		return true
	}
	if strings.HasPrefix(dep, "/") {
		return false
	}
	for id := range ids {
		if strings.HasSuffix(id, "/"+dep) {
			return true
		}
	}
	return false
}

// checkSampling checks host.json's Application Insights sampling: adaptive
// sampling is on by default in Functions, and a request or exception
// sampled away is a scan the no-scan alert misses or a failure nobody sees.
func checkSampling(host map[string]any) error {
	s, _ := armeval.Path(host, "logging", "applicationInsights", "samplingSettings").(map[string]any)
	if s == nil {
		return fmt.Errorf("host.json sets no logging.applicationInsights.samplingSettings: Functions samples requests and exceptions by default")
	}
	if s["isEnabled"] == false {
		return nil
	}
	excluded, _ := s["excludedTypes"].(string)
	types := strings.Split(excluded, ";")
	for _, want := range []string{"Request", "Exception"} {
		if !slices.ContainsFunc(types, func(t string) bool { return strings.EqualFold(strings.TrimSpace(t), want) }) {
			return fmt.Errorf("host.json samples %s telemetry (excludedTypes %q): the alerts and a person reading failures count them", want, excluded)
		}
	}
	return nil
}

// sampledTable reports whether Application Insights may sample the rows of
// a table under host.json's sampling settings.
func sampledTable(host map[string]any, table string) bool {
	s, _ := armeval.Path(host, "logging", "applicationInsights", "samplingSettings").(map[string]any)
	if s != nil && s["isEnabled"] == false {
		return false
	}
	types := map[string]string{"requests": "Request", "exceptions": "Exception", "traces": "Trace", "dependencies": "Dependency", "customEvents": "Event"}
	excluded, _ := s["excludedTypes"].(string)
	for _, t := range strings.Split(excluded, ";") {
		if strings.EqualFold(strings.TrimSpace(t), types[table]) {
			return false
		}
	}
	return true
}

// checkMetricsRegion checks that the data collection endpoint and rule are
// in the region of the workspace they feed, as ARO-HCP puts them.
func checkMetricsRegion(d *armeval.Deployment, workspace string) error {
	where := ""
	for _, a := range d.ByType("Microsoft.Monitor/accounts") {
		if strings.EqualFold(a.ID, workspace) {
			where, _ = a.Body["location"].(string)
		}
	}
	if w, ok := d.Scope.Existing[strings.ToLower(workspace)]; ok && where == "" {
		where, _ = w["location"].(string)
	}
	if where == "" {
		return fmt.Errorf("workspace %s: no region known", workspace)
	}
	for _, typ := range []string{"Microsoft.Insights/dataCollectionEndpoints", "Microsoft.Insights/dataCollectionRules"} {
		for _, r := range d.ByType(typ) {
			if loc, _ := r.Body["location"].(string); !strings.EqualFold(loc, where) {
				return fmt.Errorf("%s %s is in %s, its workspace %s in %s: the collection path belongs in the workspace's region", typ, r.Name, loc, workspace, where)
			}
		}
	}
	return nil
}

// TestUpstreamChecksFailOnBrokenCopies runs the checks that follow what
// ARM, Application Insights, Azure Monitor and ARO-HCP do on broken
// copies: each must fail, naming what is wrong.
func TestUpstreamChecksFailOnBrokenCopies(t *testing.T) {
	regionWorkspace := map[string]any{"monitorWorkspaceId": exampleWorkspace}
	zoneRedundant := map[string]any{"zoneRedundant": true, "alwaysReadyPoll": 2, "alwaysReadyPickup": 2}
	tests := []struct {
		name   string
		check  string
		values map[string]any
		edit   func(t *testing.T, f *fixture)
		want   string
	}{
		{
			name: "the rule depending on the region's workspace, outside the template", check: "dependencies", values: regionWorkspace,
			edit: func(t *testing.T, f *fixture) {
				r := findResource(t, f.template, "Microsoft.Insights/dataCollectionRules", "dcr")
				r["dependsOn"] = []any{"[variables('dceId')]", "[variables('monitorWorkspaceId')]"}
			},
			want: `depends on "` + exampleWorkspace + `", which its template does not declare`,
		},
		{
			name: "the rule group depending on the region's workspace, outside the template", check: "dependencies", values: regionWorkspace,
			edit: func(t *testing.T, f *fixture) {
				findResource(t, f.template, "Microsoft.AlertsManagement/prometheusRuleGroups", "alerts")["dependsOn"] = []any{"[variables('monitorWorkspaceId')]"}
			},
			want: "which its template does not declare",
		},
		{
			name: "a dependency on a resource no template declares", check: "dependencies",
			edit: func(t *testing.T, f *fixture) {
				r := findResource(t, f.template, "Microsoft.Insights/components", "insights")
				r["dependsOn"] = append(r["dependsOn"].([]any), "[resourceId('Microsoft.Network/virtualNetworks', 'elsewhere')]")
			},
			want: "which its template does not declare",
		},
		{
			name: "host.json sampling requests", check: "sampling",
			edit: func(t *testing.T, f *fixture) {
				armeval.Path(f.host, "logging", "applicationInsights", "samplingSettings").(map[string]any)["excludedTypes"] = "Exception"
			},
			want: "host.json samples Request telemetry",
		},
		{
			name: "host.json without sampling settings", check: "sampling",
			edit: func(t *testing.T, f *fixture) {
				delete(armeval.Path(f.host, "logging").(map[string]any), "applicationInsights")
			},
			want: "sets no logging.applicationInsights.samplingSettings",
		},
		{
			name: "a log alert counting sampled traces", check: "monitoring",
			edit: func(t *testing.T, f *fixture) {
				c := armeval.Path(findResource(t, f.template, "Microsoft.Insights/scheduledQueryRules", "start-failed"), "properties", "criteria", "allOf").([]any)[0].(map[string]any)
				c["timeAggregation"] = "Count"
				delete(c, "metricMeasureColumn")
			},
			want: "counts rows (Count) of traces",
		},
		{
			name: "the no-scan log alert counting sampled requests", check: "monitoring", values: map[string]any{"metricsExport": false},
			edit: func(t *testing.T, f *fixture) {
				armeval.Path(f.host, "logging", "applicationInsights", "samplingSettings").(map[string]any)["excludedTypes"] = "Exception"
			},
			want: "counts rows (Count) of requests",
		},
		{
			name: "the poison alert reading logs beside its metric", check: "monitoring",
			edit: func(t *testing.T, f *fixture) {
				delete(findResource(t, f.template, "Microsoft.Insights/scheduledQueryRules", "poison"), "condition")
			},
			want: "reads logs where the metric alert OpstatusPollFailing runs",
		},
		{
			name: "zone redundant on locally redundant storage", check: "zone redundancy", values: zoneRedundant,
			edit: func(t *testing.T, f *fixture) {
				findResource(t, f.template, "Microsoft.Storage/storageAccounts", "storageAccountName")["sku"] = map[string]any{"name": "Standard_LRS"}
			},
			want: "zone redundant with the host's storage opstatusinteastus Standard_LRS",
		},
		{
			name: "the collection rule in the app's region, not the workspace's", check: "monitoring", values: regionWorkspace,
			edit: func(t *testing.T, f *fixture) {
				findResource(t, f.template, "Microsoft.Insights/dataCollectionRules", "dcr")["location"] = "westus3"
			},
			want: "Microsoft.Insights/dataCollectionRules opstatus-int-eastus-dcr is in westus3, its workspace",
		},
		{
			name: "the collection endpoint elsewhere than its own workspace", check: "monitoring",
			edit: func(t *testing.T, f *fixture) {
				findResource(t, f.template, "Microsoft.Insights/dataCollectionEndpoints", "dce")["location"] = "westus3"
			},
			want: "dataCollectionEndpoints opstatus-int-eastus-dce is in westus3",
		},
		{
			name: "a runbook in the source repository", check: "monitoring",
			edit: func(t *testing.T, f *fixture) {
				r := ruleGroupRule(t, f.template, "OpstatusNoScan")
				r["annotations"].(map[string]any)["runbook_url"] = "https://github.com/opstatus/opstatus/blob/main/docs/operations.md#no-scan-for-three-minutes"
			},
			want: "rules are not",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := load(t)
			f.template = armeval.DeepCopy(f.template)
			f.host = armeval.DeepCopy(f.host)
			values := map[string]any{}
			for k, v := range f.values {
				values[k] = v
			}
			for k, v := range tc.values {
				values[k] = v
			}
			f.values = values
			d, err := armeval.Resolve(f.template, f.values, exampleScope)
			require.NoError(t, err)
			var check func(*armeval.Deployment, fixture) error
			for _, c := range checks {
				if c.name == tc.check {
					check = c.check
				}
			}
			require.NotNil(t, check, tc.check)
			require.NoError(t, check(d, f), "the check passes before the edit")
			tc.edit(t, &f)
			d, err = armeval.Resolve(f.template, f.values, exampleScope)
			require.NoError(t, err)
			require.ErrorContains(t, check(d, f), tc.want)
		})
	}
}

// The template passes every check with the region's workspace, with metrics
// off and zone redundant: the conditional workspace is declared, so the
// dependencies on it hold whether or not it is deployed.
func TestUpstreamChecksPass(t *testing.T) {
	f := load(t)
	for _, values := range []map[string]any{
		{"monitorWorkspaceId": exampleWorkspace},
		{"metricsExport": false},
		{"zoneRedundant": true, "alwaysReadyPoll": 2, "alwaysReadyPickup": 2},
	} {
		t.Run(fmt.Sprint(values), func(t *testing.T) {
			given := map[string]any{}
			for k, v := range f.values {
				given[k] = v
			}
			for k, v := range values {
				given[k] = v
			}
			d, err := armeval.Resolve(f.template, given, exampleScope)
			require.NoError(t, err)
			for _, c := range checks {
				require.NoError(t, c.check(d, f), c.name)
			}
		})
	}
}

// The audience's form: where Entra's identifier-URI restriction is on, an
// application's URI needs a tenant ID, its app ID or a verified domain.
func TestAudienceForm(t *testing.T) {
	for aud, ok := range map[string]bool{
		"22222222-2222-2222-2222-222222222222":                        true,
		"api://22222222-2222-2222-2222-222222222222":                  true,
		"api://11111111-2222-3333-4444-555555555555/clusters-service": true,
		"api://aro-hcp-clusters-service":                              false,
		"api://clusters-service":                                      false,
		"api://22222222-2222-2222-2222-22222222222/x":                 false,
		"": false,
	} {
		err := checkAudienceForm(aud)
		if ok {
			require.NoError(t, err, aud)
		} else {
			require.ErrorContains(t, err, "is neither a client ID nor api://<tenant or app ID>", aud)
		}
	}
	// The chart's value as shipped before: refused.
	require.Error(t, checkAudienceForm("api://aro-hcp-clusters-service"))
}

// aggregation finds PromQL aggregations and their by clause, if any.
var aggregation = regexp.MustCompile(`\b(sum|max|min|avg|count|group|stddev|stdvar|topk|bottomk|quantile)\s*(?:(by|without)\s*\(([^)]*)\))?\s*\(`)

// checkClusterKept checks that every alert keeps the cluster label the
// remote write gives each series: ARO-HCP's alert generator titles an
// incident "<cluster>: <summary>" and correlates it by
// "<alert>/<cluster>", so an aggregation must keep cluster.
func checkClusterKept(alerts []rule) error {
	for _, r := range alerts {
		for _, m := range aggregation.FindAllStringSubmatch(r.Expr, -1) {
			labels := strings.Split(m[3], ",")
			for i := range labels {
				labels[i] = strings.TrimSpace(labels[i])
			}
			keeps := m[2] == "by" && slices.Contains(labels, "cluster") || m[2] == "without" && !slices.Contains(labels, "cluster")
			if !keeps {
				return fmt.Errorf("alert %s: %q drops the cluster label", r.Alert, strings.TrimSpace(m[0]))
			}
		}
	}
	return nil
}

func TestAlertsKeepTheClusterLabel(t *testing.T) {
	pr, err := readRules(rulesFile)
	require.NoError(t, err)
	require.NoError(t, checkClusterKept(pr.alerts()))
	for _, broken := range []struct{ alert, old, new, want string }{
		{"OpstatusClusterCreatePending", "max by (cluster) (", "max(", `"max(" drops the cluster label`},
		{"OpstatusClusterServiceDegraded", "sum by (le, cluster) (", "sum by (le) (", `"sum by (le) (" drops the cluster label`},
		{"OpstatusDeferredRising", "sum by (cluster) (", "sum without (cluster) (", `"sum without (cluster) (" drops the cluster label`},
	} {
		alerts := slices.Clone(pr.alerts())
		for i := range alerts {
			if alerts[i].Alert == broken.alert {
				require.Contains(t, alerts[i].Expr, broken.old)
				alerts[i].Expr = strings.Replace(alerts[i].Expr, broken.old, broken.new, 1)
			}
		}
		require.ErrorContains(t, checkClusterKept(alerts), broken.want)
	}
}
