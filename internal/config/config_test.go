package config

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Distinctive secret values: no error text may hold them.
const (
	cosmosKey    = "c29tZS1jb3Ntb3Mta2V5LVpRN1g5LW5ldmVyLWVjaG9lZA=="
	clientSecret = "client-secret-K8vR2-never-echoed"
	urlPassword  = "url-password-W4tP1"
)

// validEnv is a complete, valid set of settings.
func validEnv() map[string]string {
	return map[string]string{
		"FUNCTIONS_CUSTOMHANDLER_PORT":  "7071",
		"COSMOS_ENDPOINT":               "https://account.documents.azure.com:443/",
		"COSMOS_DATABASE":               "opstatus",
		"COSMOS_KEY":                    cosmosKey,
		"AZURE_LOCATION":                "eastus",
		"CLUSTER_SERVICE_URL":           "https://api.example.internal/",
		"CLUSTER_SERVICE_CLIENT_ID":     "opstatus-client",
		"CLUSTER_SERVICE_CLIENT_SECRET": clientSecret,
		"CLUSTER_SERVICE_TOKEN_URL":     "https://sso.example.internal/token",
	}
}

func getenv(env map[string]string) func(string) string {
	return func(name string) string { return env[name] }
}

// with returns validEnv changed by pairs of name, value; an empty value
// unsets the setting.
func with(kv ...string) map[string]string {
	env := validEnv()
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(env, kv[i])
			continue
		}
		env[kv[i]] = kv[i+1]
	}
	return env
}

// requireNoSecret checks that an error names no secret in any form.
func requireNoSecret(t *testing.T, msg string) {
	t.Helper()
	for _, s := range []string{cosmosKey, clientSecret, urlPassword} {
		require.NotContains(t, msg, s)
		require.NotContains(t, msg, base64.StdEncoding.EncodeToString([]byte(s)))
	}
	require.NotContains(t, msg, base64.StdEncoding.EncodeToString([]byte("opstatus-client:"+clientSecret)))
}

func TestLoadValid(t *testing.T) {
	c, err := Load(getenv(validEnv()))
	require.NoError(t, err)
	require.Equal(t, DefaultScanSchedule, c.ScanSchedule.String())
	require.Equal(t, 10*time.Second, c.ScanInterval(time.Date(2026, 12, 1, 12, 0, 3, 0, time.UTC)))
	c.ScanSchedule = nil
	require.Equal(t, Config{
		Port:                       "7071",
		CosmosEndpoint:             "https://account.documents.azure.com:443",
		CosmosDatabase:             "opstatus",
		CosmosKey:                  cosmosKey,
		OperationsContainer:        "Operations",
		ResourcesContainer:         "Resources",
		LocksContainer:             "Locks",
		BillingContainer:           "Billing",
		Location:                   "eastus",
		ClusterServiceURL:          "https://api.example.internal",
		ClusterServiceClientID:     "opstatus-client",
		ClusterServiceClientSecret: clientSecret,
		ClusterServiceTokenURL:     "https://sso.example.internal/token",
		ClusterServiceMaxInFlight:  DefaultClusterServiceMaxInFlight,
		CreateDeadline:             DefaultCreateDeadline,
		DeleteDeadline:             DefaultDeleteDeadline,
		RequestCredentialDeadline:  DefaultRequestCredentialDeadline,
		RevokeCredentialsDeadline:  DefaultRevokeCredentialsDeadline,

		ClusterServiceAbandonedGrace: DefaultClusterServiceAbandonedGrace,
	}, c)
}

func TestLoadOptionalSettings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c Config)
	}{
		{"no credentials at all", with("CLUSTER_SERVICE_CLIENT_ID", "", "CLUSTER_SERVICE_CLIENT_SECRET", "", "CLUSTER_SERVICE_TOKEN_URL", ""),
			func(t *testing.T, c Config) {
				require.Empty(t, c.ClusterServiceClientID)
				require.Empty(t, c.ClusterServiceClientSecret)
				require.Empty(t, c.ClusterServiceTokenURL)
			}},
		{"no cosmos key means the Azure credential", with("COSMOS_KEY", ""),
			func(t *testing.T, c Config) { require.Empty(t, c.CosmosKey) }},
		{"containers", with("COSMOS_OPERATIONS_CONTAINER", "ops", "COSMOS_RESOURCES_CONTAINER", " res ", "COSMOS_LOCKS_CONTAINER", "lk",
			"COSMOS_BILLING_CONTAINER", "bill"),
			func(t *testing.T, c Config) {
				require.Equal(t, []string{"ops", "res", "lk", "bill"},
					[]string{c.OperationsContainer, c.ResourcesContainer, c.LocksContainer, c.BillingContainer})
			}},
		{"blank containers keep the defaults", with("COSMOS_OPERATIONS_CONTAINER", "  ", "COSMOS_LOCKS_CONTAINER", "\t", "COSMOS_BILLING_CONTAINER", " "),
			func(t *testing.T, c Config) {
				require.Equal(t, []string{"Operations", "Locks", "Billing"}, []string{c.OperationsContainer, c.LocksContainer, c.BillingContainer})
			}},
		{"operations by subscription by default", validEnv(),
			func(t *testing.T, c Config) { require.Empty(t, c.OperationsPartitionKey) }},
		{"a fixed operations partition", with("COSMOS_OPERATIONS_PARTITION_KEY", " workaround "),
			func(t *testing.T, c Config) { require.Equal(t, "workaround", c.OperationsPartitionKey) }},
		{"a fixed operations partition keeps its case", with("COSMOS_OPERATIONS_PARTITION_KEY", "Ops Ü"),
			func(t *testing.T, c Config) { require.Equal(t, "Ops Ü", c.OperationsPartitionKey) }},
		{"a blank operations partition is none", with("COSMOS_OPERATIONS_PARTITION_KEY", " \t"),
			func(t *testing.T, c Config) { require.Empty(t, c.OperationsPartitionKey) }},
		{"location", with("AZURE_LOCATION", " westus2 "),
			func(t *testing.T, c Config) { require.Equal(t, "westus2", c.Location) }},
		{"the identity and the metrics' remote write", with("AZURE_CLIENT_ID", " 0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b ",
			"METRICS_REMOTE_WRITE_URL", " https://dce.example/dataCollectionRules/dcr-1/streams/Microsoft-PrometheusMetrics/api/v1/write "),
			func(t *testing.T, c Config) {
				require.Equal(t, "0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b", c.AzureClientID)
				require.Equal(t, "https://dce.example/dataCollectionRules/dcr-1/streams/Microsoft-PrometheusMetrics/api/v1/write", c.MetricsRemoteWriteURL)
			}},
		{"no remote write by default", validEnv(),
			func(t *testing.T, c Config) { require.Empty(t, c.MetricsRemoteWriteURL) }},
		{"bools", with("COSMOS_INSECURE_SKIP_VERIFY", "true", "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "TRUE", "NOTIFICATIONS_ALLOW_HTTP", " 1 ",
			"COSMOS_ENDPOINT", "https://127.0.0.1:8081", "CLUSTER_SERVICE_URL", "https://localhost:8443", "CLUSTER_SERVICE_TOKEN_URL", "https://[::1]:8444/token"),
			func(t *testing.T, c Config) {
				require.True(t, c.CosmosInsecureSkipVerify)
				require.True(t, c.ClusterServiceInsecureSkipVerify)
				require.True(t, c.NotificationsAllowHTTP)
			}},
		{"bools default to false", validEnv(),
			func(t *testing.T, c Config) {
				require.False(t, c.CosmosInsecureSkipVerify)
				require.False(t, c.ClusterServiceInsecureSkipVerify)
				require.False(t, c.NotificationsAllowHTTP, "notifications are https only unless a local setting says otherwise")
			}},
		{"explicit false", with("COSMOS_INSECURE_SKIP_VERIFY", "false", "NOTIFICATIONS_ALLOW_HTTP", "0"),
			func(t *testing.T, c Config) {
				require.False(t, c.CosmosInsecureSkipVerify)
				require.False(t, c.NotificationsAllowHTTP)
			}},
		{"plain http URLs for local servers", with("COSMOS_ENDPOINT", "http://127.0.0.1:8081", "CLUSTER_SERVICE_URL", "http://127.0.0.1:8000"),
			func(t *testing.T, c Config) {
				require.Equal(t, "http://127.0.0.1:8081", c.CosmosEndpoint)
				require.Equal(t, "http://127.0.0.1:8000", c.ClusterServiceURL)
			}},
		{"abandoned grace", with("CLUSTER_SERVICE_ABANDONED_GRACE", "45s"),
			func(t *testing.T, c Config) { require.Equal(t, 45*time.Second, c.ClusterServiceAbandonedGrace) }},
		{"port bounds", with("FUNCTIONS_CUSTOMHANDLER_PORT", "65535"),
			func(t *testing.T, c Config) { require.Equal(t, "65535", c.Port) }},
		{"port with spaces", with("FUNCTIONS_CUSTOMHANDLER_PORT", " 1 "),
			func(t *testing.T, c Config) { require.Equal(t, "1", c.Port) }},
		{"scan schedule", with("SCAN_SCHEDULE", "*/30 * * * * *", "CLUSTER_SERVICE_MAX_IN_FLIGHT", "8"),
			func(t *testing.T, c Config) {
				require.Equal(t, 30*time.Second, c.ScanInterval(time.Date(2026, 12, 1, 12, 0, 3, 0, time.UTC)))
				require.Equal(t, 8, c.ClusterServiceMaxInFlight)
			}},
		{"deadlines", with("OPERATION_DEADLINE_CREATE", "90m", "OPERATION_DEADLINE_UPDATE", "6h", "OPERATION_DEADLINE_DELETE", "none",
			"OPERATION_DEADLINE_REQUESTCREDENTIAL", "5m", "OPERATION_DEADLINE_REVOKECREDENTIALS", "none"),
			func(t *testing.T, c Config) {
				require.Equal(t, []time.Duration{90 * time.Minute, 6 * time.Hour, 0, 5 * time.Minute, 0},
					[]time.Duration{c.CreateDeadline, c.UpdateDeadline, c.DeleteDeadline, c.RequestCredentialDeadline, c.RevokeCredentialsDeadline})
			}},
		{"scan schedule as a TimeSpan", with("SCAN_SCHEDULE", "00:01:00"),
			func(t *testing.T, c Config) { require.Equal(t, time.Minute, c.ScanInterval(time.Now())) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(getenv(tc.env))
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the setting the error must name
	}{
		// Every required setting, missing or blank.
		{"port missing", with("FUNCTIONS_CUSTOMHANDLER_PORT", ""), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port blank", with("FUNCTIONS_CUSTOMHANDLER_PORT", "  "), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"cosmos endpoint missing", with("COSMOS_ENDPOINT", ""), "COSMOS_ENDPOINT"},
		{"cosmos endpoint blank", with("COSMOS_ENDPOINT", " \t"), "COSMOS_ENDPOINT"},
		{"cosmos database missing", with("COSMOS_DATABASE", ""), "COSMOS_DATABASE"},
		{"cosmos database blank", with("COSMOS_DATABASE", "\n"), "COSMOS_DATABASE"},
		{"location missing", with("AZURE_LOCATION", ""), "AZURE_LOCATION"},
		{"location blank", with("AZURE_LOCATION", " "), "AZURE_LOCATION"},
		{"cluster service URL missing", with("CLUSTER_SERVICE_URL", ""), "CLUSTER_SERVICE_URL"},
		{"cluster service URL blank", with("CLUSTER_SERVICE_URL", " "), "CLUSTER_SERVICE_URL"},

		{"abandoned grace zero", with("CLUSTER_SERVICE_ABANDONED_GRACE", "0s"), "CLUSTER_SERVICE_ABANDONED_GRACE"},
		{"abandoned grace not a duration", with("CLUSTER_SERVICE_ABANDONED_GRACE", "30"), "CLUSTER_SERVICE_ABANDONED_GRACE"},
		{"abandoned grace too long", with("CLUSTER_SERVICE_ABANDONED_GRACE", "1h"), "CLUSTER_SERVICE_ABANDONED_GRACE"},

		// Ports.
		{"port zero", with("FUNCTIONS_CUSTOMHANDLER_PORT", "0"), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port too large", with("FUNCTIONS_CUSTOMHANDLER_PORT", "65536"), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port negative", with("FUNCTIONS_CUSTOMHANDLER_PORT", "-1"), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port not a number", with("FUNCTIONS_CUSTOMHANDLER_PORT", "http"), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port with a host", with("FUNCTIONS_CUSTOMHANDLER_PORT", "0.0.0.0:7071"), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port with a suffix", with("FUNCTIONS_CUSTOMHANDLER_PORT", "7071a"), "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{"port hexadecimal", with("FUNCTIONS_CUSTOMHANDLER_PORT", "0x1f"), "FUNCTIONS_CUSTOMHANDLER_PORT"},

		// Bools.
		{"cosmos insecure yes", with("COSMOS_INSECURE_SKIP_VERIFY", "yes"), "COSMOS_INSECURE_SKIP_VERIFY"},
		{"cluster service insecure maybe", with("CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "maybe"), "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY"},
		{"allow http 2", with("NOTIFICATIONS_ALLOW_HTTP", "2"), "NOTIFICATIONS_ALLOW_HTTP"},
		{"allow http on", with("NOTIFICATIONS_ALLOW_HTTP", "on"), "NOTIFICATIONS_ALLOW_HTTP"},

		// URLs.
		{"cosmos endpoint not a URL", with("COSMOS_ENDPOINT", "account.documents.azure.com"), "COSMOS_ENDPOINT"},
		{"cosmos endpoint relative", with("COSMOS_ENDPOINT", "/dbs/opstatus"), "COSMOS_ENDPOINT"},
		{"cosmos endpoint scheme", with("COSMOS_ENDPOINT", "ftp://account.documents.azure.com"), "COSMOS_ENDPOINT"},
		{"cosmos endpoint no host", with("COSMOS_ENDPOINT", "https://"), "COSMOS_ENDPOINT"},
		{"cosmos endpoint unparsable", with("COSMOS_ENDPOINT", "https://[::1"), "COSMOS_ENDPOINT"},
		{"cosmos endpoint control character", with("COSMOS_ENDPOINT", "https://acc\x7f.example"), "COSMOS_ENDPOINT"},
		{"cosmos endpoint with credentials", with("COSMOS_ENDPOINT", "https://user:"+urlPassword+"@account.documents.azure.com"), "COSMOS_ENDPOINT"},
		{"cluster service URL not a URL", with("CLUSTER_SERVICE_URL", "api.example.internal"), "CLUSTER_SERVICE_URL"},
		{"cluster service URL scheme", with("CLUSTER_SERVICE_URL", "file:///etc/passwd"), "CLUSTER_SERVICE_URL"},
		{"cluster service URL opaque", with("CLUSTER_SERVICE_URL", "https:api.example.internal"), "CLUSTER_SERVICE_URL"},
		{"cluster service URL with credentials", with("CLUSTER_SERVICE_URL", "https://ocm:"+urlPassword+"@api.example.internal"), "CLUSTER_SERVICE_URL"},
		{"token URL scheme", with("CLUSTER_SERVICE_TOKEN_URL", "javascript:alert(1)"), "CLUSTER_SERVICE_TOKEN_URL"},
		{"token URL relative", with("CLUSTER_SERVICE_TOKEN_URL", "/token"), "CLUSTER_SERVICE_TOKEN_URL"},
		{"token URL with credentials", with("CLUSTER_SERVICE_TOKEN_URL", "https://id:"+urlPassword+"@sso.example.internal/token"), "CLUSTER_SERVICE_TOKEN_URL"},

		// Scan schedule and Cluster Service concurrency.
		{"scan schedule of five fields", with("SCAN_SCHEDULE", "*/10 * * * *"), "SCAN_SCHEDULE"},
		{"scan schedule not one", with("SCAN_SCHEDULE", "every ten seconds"), "SCAN_SCHEDULE"},
		{"max in flight zero", with("CLUSTER_SERVICE_MAX_IN_FLIGHT", "0"), "CLUSTER_SERVICE_MAX_IN_FLIGHT"},
		{"max in flight huge", with("CLUSTER_SERVICE_MAX_IN_FLIGHT", "100000"), "CLUSTER_SERVICE_MAX_IN_FLIGHT"},
		{"max in flight not a number", with("CLUSTER_SERVICE_MAX_IN_FLIGHT", "many"), "CLUSTER_SERVICE_MAX_IN_FLIGHT"},

		{"deadline negative", with("OPERATION_DEADLINE_CREATE", "-1h"), "OPERATION_DEADLINE_CREATE"},
		{"deadline zero", with("OPERATION_DEADLINE_UPDATE", "0"), "OPERATION_DEADLINE_UPDATE"},
		{"deadline without a unit", with("OPERATION_DEADLINE_DELETE", "12"), "OPERATION_DEADLINE_DELETE"},

		{"operations partition with a control character", with("COSMOS_OPERATIONS_PARTITION_KEY", "work\x00around"), "COSMOS_OPERATIONS_PARTITION_KEY"},
		{"operations partition not UTF-8", with("COSMOS_OPERATIONS_PARTITION_KEY", "work\xffaround"), "COSMOS_OPERATIONS_PARTITION_KEY"},
		{"operations partition too long", with("COSMOS_OPERATIONS_PARTITION_KEY", strings.Repeat("w", 2049)), "COSMOS_OPERATIONS_PARTITION_KEY"},

		// Locations: region names, not display names.
		{"location a display name", with("AZURE_LOCATION", "East US"), "AZURE_LOCATION"},
		{"location upper case", with("AZURE_LOCATION", "EastUS"), "AZURE_LOCATION"},
		{"location with a hyphen", with("AZURE_LOCATION", "east-us"), "AZURE_LOCATION"},
		{"location starting with a digit", with("AZURE_LOCATION", "2eastus"), "AZURE_LOCATION"},
		{"location not ASCII", with("AZURE_LOCATION", "eastüs"), "AZURE_LOCATION"},

		{"credential request deadline zero", with("OPERATION_DEADLINE_REQUESTCREDENTIAL", "0s"), "OPERATION_DEADLINE_REQUESTCREDENTIAL"},
		{"revocation deadline without a unit", with("OPERATION_DEADLINE_REVOKECREDENTIALS", "30"), "OPERATION_DEADLINE_REVOKECREDENTIALS"},

		// Client credentials: all three or none.
		{"only client id", with("CLUSTER_SERVICE_CLIENT_SECRET", "", "CLUSTER_SERVICE_TOKEN_URL", ""), "CLUSTER_SERVICE_CLIENT_SECRET"},
		{"only client secret", with("CLUSTER_SERVICE_CLIENT_ID", "", "CLUSTER_SERVICE_TOKEN_URL", ""), "CLUSTER_SERVICE_CLIENT_ID"},
		{"only token URL", with("CLUSTER_SERVICE_CLIENT_ID", "", "CLUSTER_SERVICE_CLIENT_SECRET", ""), "CLUSTER_SERVICE_CLIENT_SECRET"},
		{"no client id", with("CLUSTER_SERVICE_CLIENT_ID", ""), "CLUSTER_SERVICE_CLIENT_ID"},
		{"no client secret", with("CLUSTER_SERVICE_CLIENT_SECRET", ""), "CLUSTER_SERVICE_CLIENT_SECRET"},
		{"no token URL", with("CLUSTER_SERVICE_TOKEN_URL", ""), "CLUSTER_SERVICE_TOKEN_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(getenv(tc.env))
			require.Error(t, err)
			require.Equal(t, Config{}, c, "no partial configuration on error")
			msg := err.Error()
			require.Contains(t, msg, tc.want)
			require.NotContains(t, msg, "\n", "one line")
			requireNoSecret(t, msg)
		})
	}
}

// TestLoadNamesTheFirstProblem checks that with several problems the error
// names one setting, the first in the settings table.
func TestLoadNamesTheFirstProblem(t *testing.T) {
	_, err := Load(getenv(with("COSMOS_ENDPOINT", "", "CLUSTER_SERVICE_URL", "", "NOTIFICATIONS_ALLOW_HTTP", "x")))
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "COSMOS_ENDPOINT:"), err.Error())
	require.NotContains(t, err.Error(), "CLUSTER_SERVICE_URL")
}

// TestLoadEmptyEnvironment is the handler started with nothing set.
func TestLoadEmptyEnvironment(t *testing.T) {
	_, err := Load(func(string) string { return "" })
	require.Error(t, err)
	require.Contains(t, err.Error(), "FUNCTIONS_CUSTOMHANDLER_PORT")
}

func TestFunctionTimeout(t *testing.T) {
	for _, tc := range []struct {
		hostJSON string
		want     time.Duration
		err      string
	}{
		{`{"version":"2.0","functionTimeout":"00:05:00"}`, 5 * time.Minute, ""},
		{`{"functionTimeout":"00:10:00"}`, 10 * time.Minute, ""},
		{`{"functionTimeout":"1.00:00:00"}`, 24 * time.Hour, ""},
		{`{"version":"2.0"}`, DefaultFunctionTimeout, ""},
		{`{"functionTimeout":"-1"}`, DefaultFunctionTimeout, ""},
		{`{"functionTimeout":"00:00:00"}`, 0, "not a positive TimeSpan"},
		{`{"functionTimeout":"soon"}`, 0, "not a positive TimeSpan"},
		{`{"functionTimeout":300}`, 0, "host.json"},
		{`not json`, 0, "host.json"},
	} {
		got, err := FunctionTimeout([]byte(tc.hostJSON))
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.hostJSON)
			continue
		}
		require.NoError(t, err, tc.hostJSON)
		require.Equal(t, tc.want, got, tc.hostJSON)
	}
	root, err := os.ReadFile("../../host.json")
	require.NoError(t, err)
	got, err := FunctionTimeout(root)
	require.NoError(t, err, "the project's host.json")
	require.Positive(t, got)
}

// CLUSTER_SERVICE_MAX_IN_FLIGHT is each process's ceiling, with or
// without a budget; CLUSTER_SERVICE_BUDGET is shared through the ledger in
// the Leases container, so it needs COSMOS_LEASES_CONTAINER. The settings
// of the static split are gone: a process no longer derives its cap from
// instance counts.
func TestClusterServiceBudget(t *testing.T) {
	for _, tc := range []struct {
		name                string
		cap, budget, leases string
		wantCap, wantBudget int
		wantErr             string
	}{
		{name: "neither: the default ceiling", wantCap: DefaultClusterServiceMaxInFlight},
		{name: "a ceiling alone", cap: "12", wantCap: 12},
		{name: "a budget with the Leases container", budget: "256", leases: "Leases", wantCap: DefaultClusterServiceMaxInFlight, wantBudget: 256},
		{name: "a ceiling over the budget is only a ceiling", cap: "512", budget: "256", leases: "Leases", wantCap: 512, wantBudget: 256},
		{name: "a budget without the Leases container", budget: "256", wantErr: "CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER"},
		{name: "a budget of zero", budget: "0", leases: "Leases", wantErr: "CLUSTER_SERVICE_BUDGET"},
		{name: "a ceiling of zero", cap: "0", wantErr: "CLUSTER_SERVICE_MAX_IN_FLIGHT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := with("CLUSTER_SERVICE_MAX_IN_FLIGHT", tc.cap, "CLUSTER_SERVICE_BUDGET", tc.budget, "COSMOS_LEASES_CONTAINER", tc.leases,
				// Read no more: an old deployment's settings change nothing.
				"MAXIMUM_INSTANCE_COUNT", "1", "PICKUP_MAXIMUM_INSTANCE_COUNT", "1")
			c, err := Load(func(k string) string { return env[k] })
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantCap, c.ClusterServiceMaxInFlight)
			require.Equal(t, tc.wantBudget, c.ClusterServiceBudget)
		})
	}
}

// The handler tells that the host runs pickup as the host decides it: every
// %SETTING% of pickup/function.json set, the trigger's connection set, and
// the function not disabled.
func TestPickupRuns(t *testing.T) {
	pickup := []string{"COSMOS_OPERATIONS_CONTAINER", "Operations", "COSMOS_LEASES_CONTAINER", " Leases ",
		"COSMOS__accountEndpoint", "https://account.documents.azure.com:443/"}
	tests := []struct {
		name   string
		env    map[string]string
		want   bool
		leases string
	}{
		{"every setting", with(pickup...), true, "Leases"},
		{"a connection string", with(append(pickup, "COSMOS__accountEndpoint", "", "COSMOS", "AccountEndpoint=https://x/;AccountKey=a2V5")...), true, "Leases"},
		{"none of them", validEnv(), false, ""},
		{"no lease container", with(append(pickup, "COSMOS_LEASES_CONTAINER", "")...), false, ""},
		{"a blank lease container", with(append(pickup, "COSMOS_LEASES_CONTAINER", "  ")...), false, ""},
		{"no operations container: the handler's default does not resolve %COSMOS_OPERATIONS_CONTAINER%",
			with(append(pickup, "COSMOS_OPERATIONS_CONTAINER", "")...), false, "Leases"},
		{"no connection", with(append(pickup, "COSMOS__accountEndpoint", "")...), false, "Leases"},
		{"disabled", with(append(pickup, "AzureWebJobs.pickup.Disabled", "True")...), false, "Leases"},
		{"disabled by 1", with(append(pickup, "AzureWebJobs.pickup.Disabled", "1")...), false, "Leases"},
		{"not disabled", with(append(pickup, "AzureWebJobs.pickup.Disabled", "false")...), true, "Leases"},
		{"disabled by the Linux name", with(append(pickup, "AzureWebJobs_pickup_Disabled", "true")...), false, "Leases"},
		{"not disabled by either name", with(append(pickup, "AzureWebJobs.pickup.Disabled", "false", "AzureWebJobs_pickup_Disabled", "0")...), true, "Leases"},
		{"another function disabled", with(append(pickup, "AzureWebJobs.poll.Disabled", "true")...), true, "Leases"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(getenv(tt.env))
			require.NoError(t, err)
			require.Equal(t, tt.want, c.PickupRuns)
			require.Equal(t, tt.leases, c.LeasesContainer)
		})
	}
}
