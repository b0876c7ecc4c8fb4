package deploy

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/stretchr/testify/require"
)

// The monitoring path: the handler pushes its metrics (remote write, the
// app's identity) to a data collection rule feeding an Azure Monitor
// workspace, on which the PrometheusRule's alerts run as a
// prometheusRuleGroups resource; what Flex sends to Application Insights
// anyway (the host's requests and the handler's output) carries the log
// alerts that do not need the metrics.

// logAlerts are the scheduled query rules the template must have, by name
// suffix, with the table each queries.
var logAlerts = map[string]string{"no-scan": "requests", "poison": "traces", "start-failed": "traces"}

// metricAlerts are the log alerts a Prometheus alert replaces when the
// metrics are exported.
var metricAlerts = map[string]string{"no-scan": "OpstatusNoScan", "poison": "OpstatusPollFailing"}

// checkMonitoring checks the monitoring resources against the parameters,
// the PrometheusRule and the handler's settings.
func checkMonitoring(d *armeval.Deployment, f fixture) error {
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	actionGroup, _ := d.Params["actionGroupId"].(string)
	if err := checkLogAlerts(d, f.host, actionGroup); err != nil {
		return err
	}
	groups := d.ByType("Microsoft.AlertsManagement/prometheusRuleGroups")
	rules := d.ByType("Microsoft.Insights/dataCollectionRules")
	endpoints := d.ByType("Microsoft.Insights/dataCollectionEndpoints")
	rw := settings["METRICS_REMOTE_WRITE_URL"]
	if d.Params["metricsExport"] != true {
		if rw != "" || len(groups)+len(rules)+len(endpoints)+len(d.ByType("Microsoft.Monitor/accounts")) > 0 {
			return fmt.Errorf("metricsExport is off, but METRICS_REMOTE_WRITE_URL is %q and the template deploys %d rule groups, %d data collection rules, %d endpoints", rw, len(groups), len(rules), len(endpoints))
		}
		return nil
	}
	if len(groups) != 1 || len(rules) != 1 || len(endpoints) != 1 {
		return fmt.Errorf("metricsExport is on: want one prometheusRuleGroups, one data collection rule and one endpoint, have %d, %d, %d", len(groups), len(rules), len(endpoints))
	}
	dcr, dce := rules[0], endpoints[0]
	if got, ok := remoteWriteRule(rw); !ok || !strings.EqualFold(got, dcr.ID) {
		return fmt.Errorf("METRICS_REMOTE_WRITE_URL %q does not write to data collection rule %s", rw, dcr.ID)
	}
	if host := strings.TrimPrefix(rw, "https://"); !strings.HasPrefix(host, dce.Name+"-") {
		return fmt.Errorf("METRICS_REMOTE_WRITE_URL %q is not on endpoint %s's metrics ingestion host", rw, dce.Name)
	}
	if got, _ := armeval.Path(dcr.Body, "properties", "dataCollectionEndpointId").(string); !strings.EqualFold(got, dce.ID) {
		return fmt.Errorf("data collection rule %s takes its data through %q, not endpoint %s", dcr.Name, got, dce.ID)
	}
	workspace, err := monitorWorkspace(d)
	if err != nil {
		return err
	}
	if err := checkMetricsRegion(d, workspace); err != nil {
		return err
	}
	accounts, _ := armeval.Path(dcr.Body, "properties", "destinations", "monitoringAccounts").([]any)
	flows, _ := armeval.Path(dcr.Body, "properties", "dataFlows").([]any)
	if len(accounts) != 1 || len(flows) != 1 || !strings.EqualFold(fmt.Sprint(armeval.Path(accounts[0], "accountResourceId")), workspace) ||
		!reflect.DeepEqual(armeval.Path(flows[0], "streams"), []any{"Microsoft-PrometheusMetrics"}) ||
		!reflect.DeepEqual(armeval.Path(flows[0], "destinations"), []any{armeval.Path(accounts[0], "name")}) {
		return fmt.Errorf("data collection rule %s does not send Microsoft-PrometheusMetrics to the one workspace %s", dcr.Name, workspace)
	}
	group := groups[0]
	if scopes, _ := armeval.Path(group.Body, "properties", "scopes").([]any); len(scopes) != 1 || !strings.EqualFold(fmt.Sprint(scopes[0]), workspace) {
		return fmt.Errorf("rule group %s runs on %v, not on workspace %s", group.Name, scopes, workspace)
	}
	pr, err := readRules(rulesFile)
	if err != nil {
		return err
	}
	runbooks, _ := d.Params["runbookBaseUrl"].(string)
	want, err := ruleGroupRules(pr, actionGroup, runbooks)
	if err != nil {
		return err
	}
	got, _ := armeval.Path(group.Body, "properties", "rules").([]any)
	if !reflect.DeepEqual(normalizeJSON(got), normalizeJSON(want)) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		return fmt.Errorf("rule group %s's rules are not %s's:\nhave %s\nwant %s", group.Name, rulesFile, g, w)
	}
	if armeval.Path(group.Body, "properties", "enabled") != true || armeval.Path(group.Body, "properties", "interval") != "PT1M" {
		return fmt.Errorf("rule group %s is not enabled at a 1-minute interval (the promtool tests' evaluation_interval)", group.Name)
	}
	return nil
}

// monitorWorkspace is the Azure Monitor workspace the metrics go to: the
// given one, or the one the template creates.
func monitorWorkspace(d *armeval.Deployment) (string, error) {
	if id, _ := d.Params["monitorWorkspaceId"].(string); id != "" {
		if typ, _ := armeval.ResourceType(id); !strings.EqualFold(typ, "Microsoft.Monitor/accounts") {
			return "", fmt.Errorf("monitorWorkspaceId %s is not an Azure Monitor workspace's resource ID", id)
		}
		if n := len(d.ByType("Microsoft.Monitor/accounts")); n != 0 {
			return "", fmt.Errorf("monitorWorkspaceId is given, yet the template creates %d workspaces", n)
		}
		return id, nil
	}
	a, err := d.One("Microsoft.Monitor/accounts")
	if err != nil {
		return "", fmt.Errorf("no monitorWorkspaceId and %w", err)
	}
	return a.ID, nil
}

// ruleGroupRules are the prometheusRuleGroups rules of a PrometheusRule:
// each alert with its expression on one line, its for as an ISO 8601
// duration, its labels and annotations (runbook_url's anchor on the
// deployer's runbooks), Azure's severity (0 to 4) from the IcM severity
// label (2.5 is 2), and the action group when there is one.
func ruleGroupRules(pr prometheusRule, actionGroup, runbooks string) ([]any, error) {
	var out []any
	for _, r := range pr.alerts() {
		_, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "#")
		if !ok {
			return nil, fmt.Errorf("alert %s: runbook_url %q names no heading", r.Alert, r.Annotations["runbook_url"])
		}
		annotations := map[string]string{}
		for k, v := range r.Annotations {
			annotations[k] = v
		}
		annotations["runbook_url"] = runbooks + "#" + anchor
		sev, err := strconv.ParseFloat(r.Labels["severity"], 64)
		if err != nil {
			return nil, fmt.Errorf("alert %s: severity %q: %w", r.Alert, r.Labels["severity"], err)
		}
		actions := []any{}
		if actionGroup != "" {
			actions = append(actions, map[string]any{"actionGroupId": actionGroup})
		}
		rule := map[string]any{
			"alert":       r.Alert,
			"enabled":     true,
			"expression":  strings.Join(strings.Fields(r.Expr), " "),
			"severity":    int64(math.Floor(sev)),
			"labels":      r.Labels,
			"annotations": annotations,
			"actions":     actions,
			"resolveConfiguration": map[string]any{
				"autoResolved":  true,
				"timeToResolve": "PT10M",
			},
		}
		if r.For != "" {
			m, ok := strings.CutSuffix(r.For, "m")
			n, err := strconv.Atoi(m)
			if !ok || err != nil {
				return nil, fmt.Errorf("alert %s: for %q is not in minutes", r.Alert, r.For)
			}
			rule["for"] = fmt.Sprintf("PT%dM", n)
		}
		out = append(out, rule)
	}
	return out, nil
}

// normalizeJSON gives a value the types JSON decoding gives it.
func normalizeJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// checkLogAlerts checks the scheduled query rules over Application
// Insights: each of logAlerts, on the template's component, notifying
// the action group when there is one.
func checkLogAlerts(d *armeval.Deployment, host map[string]any, actionGroup string) error {
	insights, err := d.One("Microsoft.Insights/components")
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, r := range d.ByType("Microsoft.Insights/scheduledQueryRules") {
		suffix := ""
		for s := range logAlerts {
			if strings.HasSuffix(r.Name, "-"+s) {
				suffix = s
			}
		}
		if suffix == "" {
			return fmt.Errorf("scheduled query rule %s is none of %v", r.Name, logAlerts)
		}
		seen[suffix] = true
		if scopes, _ := armeval.Path(r.Body, "properties", "scopes").([]any); len(scopes) != 1 || !strings.EqualFold(fmt.Sprint(scopes[0]), insights.ID) {
			return fmt.Errorf("scheduled query rule %s queries %v, not Application Insights %s", r.Name, scopes, insights.ID)
		}
		conds, _ := armeval.Path(r.Body, "properties", "criteria", "allOf").([]any)
		if len(conds) != 1 {
			return fmt.Errorf("scheduled query rule %s has %d conditions, want 1", r.Name, len(conds))
		}
		if q, _ := armeval.Path(conds[0], "query").(string); !strings.HasPrefix(q, logAlerts[suffix]+" |") {
			return fmt.Errorf("scheduled query rule %s queries %q, not %s", r.Name, q, logAlerts[suffix])
		}
		// A sampled row stands for itemCount items.
		agg, measure := armeval.Path(conds[0], "timeAggregation"), armeval.Path(conds[0], "metricMeasureColumn")
		if !(agg == "Total" && measure == "itemCount") && !(agg == "Count" && !sampledTable(host, logAlerts[suffix])) {
			return fmt.Errorf("scheduled query rule %s counts rows (%v) of %s, which host.json lets Application Insights sample: sum itemCount", r.Name, agg, logAlerts[suffix])
		}
		if name := metricAlerts[suffix]; name != "" && d.Params["metricsExport"] == true {
			return fmt.Errorf("scheduled query rule %s reads logs where the metric alert %s runs", r.Name, name)
		}
		groups, _ := armeval.Path(r.Body, "properties", "actions", "actionGroups").([]any)
		if want := slices.DeleteFunc([]any{actionGroup}, func(v any) bool { return v == "" }); !reflect.DeepEqual(normalizeJSON(groups), normalizeJSON(want)) && !(len(groups) == 0 && len(want) == 0) {
			return fmt.Errorf("scheduled query rule %s notifies %v, not actionGroupId %q", r.Name, groups, actionGroup)
		}
	}
	for s := range logAlerts {
		if !seen[s] && (metricAlerts[s] == "" || d.Params["metricsExport"] != true) {
			return fmt.Errorf("no scheduled query rule <appName>-%s", s)
		}
	}
	return nil
}

// TestMonitoringFollowsItsParameters deploys the template with metrics
// export off, with a given workspace and with an action group.
func TestMonitoringFollowsItsParameters(t *testing.T) {
	f := load(t)
	const (
		workspace = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/arohcp-int-eastus-svc/providers/Microsoft.Monitor/accounts/services-eastus"
		group     = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/arohcp-int-eastus-rp/providers/Microsoft.Insights/actionGroups/icm-rp"
	)
	for _, tc := range []struct {
		name   string
		values map[string]any
		check  func(t *testing.T, d *armeval.Deployment)
	}{
		{"defaults: export on, a workspace of its own, no action group", nil, func(t *testing.T, d *armeval.Deployment) {
			a, err := d.One("Microsoft.Monitor/accounts")
			require.NoError(t, err)
			require.True(t, strings.HasSuffix(a.Name, "-amw"))
		}},
		{"export off", map[string]any{"metricsExport": false}, func(t *testing.T, d *armeval.Deployment) {
			settings, err := appSettings(d)
			require.NoError(t, err)
			require.Empty(t, settings["METRICS_REMOTE_WRITE_URL"])
			require.Empty(t, d.ByType("Microsoft.AlertsManagement/prometheusRuleGroups"))
			require.Len(t, d.ByType("Microsoft.Insights/scheduledQueryRules"), 3, "without metrics, every alert the logs can carry")
		}},
		{"the region's workspace and an action group", map[string]any{"monitorWorkspaceId": workspace, "actionGroupId": group}, func(t *testing.T, d *armeval.Deployment) {
			require.Empty(t, d.ByType("Microsoft.Monitor/accounts"))
			g, err := d.One("Microsoft.AlertsManagement/prometheusRuleGroups")
			require.NoError(t, err)
			for _, r := range armeval.Path(g.Body, "properties", "rules").([]any) {
				require.Equal(t, []any{map[string]any{"actionGroupId": group}}, normalizeJSON(armeval.Path(r, "actions")))
			}
			for _, r := range d.ByType("Microsoft.Insights/scheduledQueryRules") {
				require.Equal(t, []any{group}, normalizeJSON(armeval.Path(r.Body, "properties", "actions", "actionGroups")))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := armeval.Resolve(f.template, withValues(f.values, tc.values), exampleScope)
			require.NoError(t, err)
			require.NoError(t, checkMonitoring(d, f))
			require.NoError(t, checkGrants(d))
			tc.check(t, d)
		})
	}
}

// TestMonitoringCheckFailsOnEditedTemplate runs the monitoring and grant
// checks on broken copies of the template.
func TestMonitoringCheckFailsOnEditedTemplate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, tmpl map[string]any)
		want string
	}{
		{"a rule's threshold unlike the PrometheusRule's", func(t *testing.T, tmpl map[string]any) {
			replaceIn(t, ruleGroupRule(t, tmpl, "OpstatusClusterCreatePending"), "expression", "1200", "1800")
		}, "rules are not"},
		{"a rule left out", func(t *testing.T, tmpl map[string]any) {
			p := props(findResource(t, tmpl, "Microsoft.AlertsManagement/prometheusRuleGroups", "alerts"))
			p["rules"] = p["rules"].([]any)[1:]
		}, "rules are not"},
		{"a rule's for dropped", func(t *testing.T, tmpl map[string]any) {
			delete(ruleGroupRule(t, tmpl, "OpstatusDeferredRising"), "for")
		}, "rules are not"},
		{"rules on another workspace", func(t *testing.T, tmpl map[string]any) {
			props(findResource(t, tmpl, "Microsoft.AlertsManagement/prometheusRuleGroups", "alerts"))["scopes"] = []any{"[resourceId('Microsoft.Monitor/accounts', 'elsewhere')]"}
		}, "not on workspace"},
		{"the rule sending elsewhere", func(t *testing.T, tmpl map[string]any) {
			p := props(findResource(t, tmpl, "Microsoft.Insights/dataCollectionRules", "dcr"))
			armeval.Path(p, "destinations", "monitoringAccounts").([]any)[0].(map[string]any)["accountResourceId"] = "[resourceId('Microsoft.Monitor/accounts', 'elsewhere')]"
		}, "does not send Microsoft-PrometheusMetrics"},
		{"the write URL on another rule", func(t *testing.T, tmpl map[string]any) {
			setting(t, tmpl, "METRICS_REMOTE_WRITE_URL")["value"] = "[format('{0}/dataCollectionRules/{1}/streams/Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24', reference(variables('dceId'), '2022-06-01').metricsIngestion.endpoint, reference(resourceId('Microsoft.Insights/dataCollectionRules', 'other'), '2022-06-01').immutableId)]"
		}, "does not write to data collection rule"},
		{"no publisher role on the rule", func(t *testing.T, tmpl map[string]any) {
			removeResource(t, tmpl, findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "remote writes"))
		}, "monitoring metrics publisher on /subscriptions/11111111-2222-3333-4444-555555555555/resourcegroups/opstatus-int-eastus/providers/microsoft.insights/datacollectionrules/"},
		{"export off but the setting kept", func(t *testing.T, tmpl map[string]any) {
			parameters(tmpl)["metricsExport"].(map[string]any)["defaultValue"] = false
			setting(t, tmpl, "METRICS_REMOTE_WRITE_URL")["value"] = "https://dce.eastus-1.metrics.ingest.monitor.azure.com/x"
		}, "metricsExport is off"},
		{"a log alert without the action group", func(t *testing.T, tmpl map[string]any) {
			parameters(tmpl)["actionGroupId"].(map[string]any)["defaultValue"] = "/subscriptions/1/resourceGroups/g/providers/Microsoft.Insights/actionGroups/a"
			props(findResource(t, tmpl, "Microsoft.Insights/scheduledQueryRules", "start-failed"))["actions"] = map[string]any{}
		}, "notifies"},
		{"a log alert left out", func(t *testing.T, tmpl map[string]any) {
			removeResource(t, tmpl, findResource(t, tmpl, "Microsoft.Insights/scheduledQueryRules", "start-failed"))
		}, "no scheduled query rule <appName>-start-failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := load(t)
			tc.edit(t, f.template)
			d, err := armeval.Resolve(f.template, f.values, exampleScope)
			require.NoError(t, err)
			err = checkMonitoring(d, f)
			if err == nil {
				err = checkGrants(d)
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func ruleGroupRule(t *testing.T, tmpl map[string]any, alert string) map[string]any {
	t.Helper()
	for _, r := range props(findResource(t, tmpl, "Microsoft.AlertsManagement/prometheusRuleGroups", "alerts"))["rules"].([]any) {
		if m := r.(map[string]any); m["alert"] == alert {
			return m
		}
	}
	t.Fatalf("no rule %s in the rule group", alert)
	return nil
}

// setting returns the site's app setting entry of name.
func setting(t *testing.T, tmpl map[string]any, name string) map[string]any {
	t.Helper()
	site := findResource(t, tmpl, "Microsoft.Web/sites", "appName")
	for _, s := range armeval.Path(site, "properties", "siteConfig", "appSettings").([]any) {
		if m := s.(map[string]any); m["name"] == name {
			return m
		}
	}
	t.Fatalf("no app setting %s", name)
	return nil
}
