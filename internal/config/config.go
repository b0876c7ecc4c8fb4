// Package config reads opstatus's settings from the environment (app
// settings in Azure Functions, local.settings.json under the local host).
package config

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opstatus/opstatus/internal/loopback"
	"github.com/opstatus/opstatus/internal/schedule"
)

// Config holds every setting of the contract.
type Config struct {
	Port string // FUNCTIONS_CUSTOMHANDLER_PORT

	CosmosEndpoint           string
	CosmosDatabase           string
	CosmosKey                string
	CosmosInsecureSkipVerify bool
	OperationsContainer      string
	ResourcesContainer       string
	LocksContainer           string
	BillingContainer         string
	// OperationsPartitionKey is the one partition every Operations item is
	// in (COSMOS_OPERATIONS_PARTITION_KEY, such as ARO-HCP's frontend's
	// "workaround"); empty when each is in its subscription's.
	OperationsPartitionKey string
	// LeasesContainer is the lease container of the pickup function's
	// change-feed trigger (COSMOS_LEASES_CONTAINER); empty when not set.
	LeasesContainer string
	// PickupRuns says that the host runs the pickup function: every
	// %SETTING% of pickup/function.json resolves, its Cosmos connection
	// (COSMOS or COSMOS__accountEndpoint) is set, and
	// AzureWebJobs.pickup.Disabled is not true. Only then does scan leave
	// new operations to it.
	PickupRuns bool
	// Location is the Azure region of the resource provider (AZURE_LOCATION),
	// written into billing items.
	Location string

	// AzureClientID is the client ID of the app's user-assigned identity
	// (AZURE_CLIENT_ID), whose tokens reach Cosmos DB without a key,
	// Cluster Service with an audience and the metrics' remote write;
	// empty: the system-assigned one.
	AzureClientID string
	// MetricsRemoteWriteURL is the Prometheus remote-write endpoint of the
	// handler's metrics (METRICS_REMOTE_WRITE_URL), which telemetry checks;
	// empty: none.
	MetricsRemoteWriteURL string

	ClusterServiceURL                string
	ClusterServiceInsecureSkipVerify bool
	// ClusterServiceCAs are trusted for Cluster Service besides the
	// system's roots (CLUSTER_SERVICE_CA_BUNDLE, PEM).
	ClusterServiceCAs          []*x509.Certificate
	ClusterServiceClientID     string
	ClusterServiceClientSecret string
	ClusterServiceTokenURL     string
	// ClusterServiceAudience is the audience of the managed identity's
	// token that every Cluster Service request carries
	// (CLUSTER_SERVICE_AUDIENCE); empty: no such token.
	ClusterServiceAudience string

	NotificationsAllowHTTP bool
	// NotificationHosts are the hosts, each with its subdomains, that a
	// notificationUri may name (NOTIFICATIONS_ALLOWED_HOSTS); nil: ARM's
	// (arm.DefaultNotificationHosts).
	NotificationHosts []string

	// ScanSchedule is the scan timer's schedule (SCAN_SCHEDULE, which
	// scan/function.json names as %SCAN_SCHEDULE%): the handler reads it to
	// know when a message has been superseded by the next scan's.
	ScanSchedule schedule.Schedule
	// ClusterServiceMaxInFlight is the ceiling on the Cluster Service
	// requests in flight in the process, whatever permits it holds
	// (CLUSTER_SERVICE_MAX_IN_FLIGHT).
	ClusterServiceMaxInFlight int
	// ClusterServiceBudget is the app-wide bound on Cluster Service
	// requests in flight (CLUSTER_SERVICE_BUDGET), shared through the
	// budget ledger in LeasesContainer (internal/budget); zero when not
	// set: each process has only its ceiling.
	ClusterServiceBudget int
	// ClusterServiceAbandonedGrace is how long the permit of a Cluster
	// Service request the client gave up on stays counted, while Cluster
	// Service may still work on it (CLUSTER_SERVICE_ABANDONED_GRACE).
	ClusterServiceAbandonedGrace time.Duration

	// CreateDeadline, UpdateDeadline and DeleteDeadline
	// (OPERATION_DEADLINE_CREATE, _UPDATE, _DELETE) are how long an
	// operation may stay unfinished after its startTime; 0 means none.
	CreateDeadline, UpdateDeadline, DeleteDeadline time.Duration
	// RequestCredentialDeadline and RevokeCredentialsDeadline
	// (OPERATION_DEADLINE_REQUESTCREDENTIAL, _REVOKECREDENTIALS) are the
	// same for break-glass credential requests and revocations.
	RequestCredentialDeadline, RevokeCredentialsDeadline time.Duration
}

// Defaults of the optional settings. The Create and Delete deadlines are
// ARO-HCP's; Updates have none by default, since an upgrade can rightly take
// hours. ARO-HCP sets no deadline on credential requests and revocations:
// theirs allow three times what ARO-HCP's end-to-end tests wait for one to
// finish, as the Create deadline does for a cluster.
const (
	DefaultCreateDeadline            = time.Hour
	DefaultDeleteDeadline            = 12 * time.Hour
	DefaultRequestCredentialDeadline = 30 * time.Minute
	DefaultRevokeCredentialsDeadline = 45 * time.Minute
	DefaultBillingContainer          = "Billing"
	DefaultScanSchedule              = "*/10 * * * * *"
	// DefaultClusterServiceMaxInFlight is the template's default budget,
	// so that a lone busy process may use all of it: one core checks more
	// at 256 in flight than at 128 for a little more CPU per check
	// (BenchmarkCeiling in poll).
	DefaultClusterServiceMaxInFlight = 256
	maxClusterServiceMaxInFlight     = 4096
	maxClusterServiceBudget          = 1 << 20
	// DefaultClusterServiceAbandonedGrace is the budget's E − V, the time
	// a reclaimed holder's requests have anyway, and 1.5 times the client's
	// own timeout: how long Cluster Service may work on a request after its
	// client left is its owners' to say, and none is known yet. A longer
	// one lengthens E, and so the reclaim of a dead holder's permits.
	DefaultClusterServiceAbandonedGrace = 15 * time.Second
	maxClusterServiceAbandonedGrace     = 10 * time.Minute
)

// ScanInterval is the time between two scans: between the schedule's next
// two occurrences after now.
func (c Config) ScanInterval(now time.Time) time.Duration {
	if c.ScanSchedule == nil {
		return 0
	}
	first := c.ScanSchedule.Next(now)
	second := c.ScanSchedule.Next(first)
	if first.IsZero() || second.IsZero() {
		return 0
	}
	return second.Sub(first)
}

// Load reads the settings through getenv (os.Getenv in production). The error
// names the first missing or malformed setting and never holds a secret value.
func Load(getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	c := Config{
		Port:                             r.required("FUNCTIONS_CUSTOMHANDLER_PORT"),
		CosmosEndpoint:                   r.url("COSMOS_ENDPOINT", true),
		CosmosDatabase:                   r.required("COSMOS_DATABASE"),
		CosmosKey:                        getenv("COSMOS_KEY"),
		CosmosInsecureSkipVerify:         r.bool("COSMOS_INSECURE_SKIP_VERIFY"),
		OperationsContainer:              r.or("COSMOS_OPERATIONS_CONTAINER", "Operations"),
		ResourcesContainer:               r.or("COSMOS_RESOURCES_CONTAINER", "Resources"),
		LocksContainer:                   r.or("COSMOS_LOCKS_CONTAINER", "Locks"),
		BillingContainer:                 r.or("COSMOS_BILLING_CONTAINER", DefaultBillingContainer),
		OperationsPartitionKey:           r.partitionKey("COSMOS_OPERATIONS_PARTITION_KEY"),
		LeasesContainer:                  strings.TrimSpace(getenv("COSMOS_LEASES_CONTAINER")),
		Location:                         r.location("AZURE_LOCATION"),
		AzureClientID:                    strings.TrimSpace(getenv("AZURE_CLIENT_ID")),
		MetricsRemoteWriteURL:            strings.TrimSpace(getenv("METRICS_REMOTE_WRITE_URL")),
		ClusterServiceURL:                r.url("CLUSTER_SERVICE_URL", true),
		ClusterServiceInsecureSkipVerify: r.bool("CLUSTER_SERVICE_INSECURE_SKIP_VERIFY"),
		ClusterServiceCAs:                r.certificates("CLUSTER_SERVICE_CA_BUNDLE"),
		ClusterServiceClientID:           getenv("CLUSTER_SERVICE_CLIENT_ID"),
		ClusterServiceClientSecret:       getenv("CLUSTER_SERVICE_CLIENT_SECRET"),
		ClusterServiceTokenURL:           r.url("CLUSTER_SERVICE_TOKEN_URL", false),
		ClusterServiceAudience:           r.audience("CLUSTER_SERVICE_AUDIENCE"),
		NotificationsAllowHTTP:           r.bool("NOTIFICATIONS_ALLOW_HTTP"),
		NotificationHosts:                r.hosts("NOTIFICATIONS_ALLOWED_HOSTS"),
		ScanSchedule:                     r.schedule("SCAN_SCHEDULE", DefaultScanSchedule),
		ClusterServiceMaxInFlight:        r.count("CLUSTER_SERVICE_MAX_IN_FLIGHT", DefaultClusterServiceMaxInFlight, maxClusterServiceMaxInFlight),
		ClusterServiceBudget:             r.count("CLUSTER_SERVICE_BUDGET", 0, maxClusterServiceBudget),
		CreateDeadline:                   r.deadline("OPERATION_DEADLINE_CREATE", DefaultCreateDeadline),
		UpdateDeadline:                   r.deadline("OPERATION_DEADLINE_UPDATE", 0),
		DeleteDeadline:                   r.deadline("OPERATION_DEADLINE_DELETE", DefaultDeleteDeadline),
		RequestCredentialDeadline:        r.deadline("OPERATION_DEADLINE_REQUESTCREDENTIAL", DefaultRequestCredentialDeadline),
		RevokeCredentialsDeadline:        r.deadline("OPERATION_DEADLINE_REVOKECREDENTIALS", DefaultRevokeCredentialsDeadline),
	}
	c.ClusterServiceAbandonedGrace = r.duration("CLUSTER_SERVICE_ABANDONED_GRACE",
		DefaultClusterServiceAbandonedGrace, maxClusterServiceAbandonedGrace)
	if r.err != nil {
		return Config{}, r.err
	}
	c.PickupRuns = pickupRuns(getenv)
	if port, err := strconv.Atoi(c.Port); err != nil || port < 1 || port > 65535 {
		return Config{}, fmt.Errorf("FUNCTIONS_CUSTOMHANDLER_PORT: %q is not a port number", c.Port)
	}
	creds := []string{c.ClusterServiceClientID, c.ClusterServiceClientSecret, c.ClusterServiceTokenURL}
	set := 0
	for _, v := range creds {
		if v != "" {
			set++
		}
	}
	if set != 0 && set != len(creds) {
		return Config{}, fmt.Errorf("CLUSTER_SERVICE_CLIENT_ID, CLUSTER_SERVICE_CLIENT_SECRET, CLUSTER_SERVICE_TOKEN_URL: set all three or none")
	}
	if set != 0 && c.ClusterServiceAudience != "" {
		return Config{}, fmt.Errorf("CLUSTER_SERVICE_AUDIENCE, CLUSTER_SERVICE_CLIENT_ID: the managed identity's token and client credentials are exclusive; set one")
	}
	if len(c.ClusterServiceCAs) > 0 && c.ClusterServiceInsecureSkipVerify {
		return Config{}, fmt.Errorf("CLUSTER_SERVICE_CA_BUNDLE, CLUSTER_SERVICE_INSECURE_SKIP_VERIFY: a bundle to verify with and no verification; set one")
	}
	if err := checkTransport(c); err != nil {
		return Config{}, err
	}
	if c.ClusterServiceBudget != 0 && c.LeasesContainer == "" {
		return Config{}, fmt.Errorf("CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER, where the processes share it")
	}
	return c, nil
}

// checkTransport refuses plain http and unverified TLS except to a loopback
// host: over either, a client secret, a bearer token or a key's signature
// can be read or handed to whoever answers, and a status forged (azcore's
// BearerTokenPolicy refuses a token over http for the same reason).
func checkTransport(c Config) error {
	const emulator, gateway = "an emulator", "trust a private CA with CLUSTER_SERVICE_CA_BUNDLE"
	for _, e := range []struct {
		name, url, skipName string
		skip                bool
		instead             string
	}{
		{"COSMOS_ENDPOINT", c.CosmosEndpoint, "COSMOS_INSECURE_SKIP_VERIFY", c.CosmosInsecureSkipVerify, emulator},
		{"CLUSTER_SERVICE_URL", c.ClusterServiceURL, "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", c.ClusterServiceInsecureSkipVerify, gateway},
		{"CLUSTER_SERVICE_TOKEN_URL", c.ClusterServiceTokenURL, "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", c.ClusterServiceInsecureSkipVerify, gateway},
	} {
		u, err := url.Parse(e.url)
		if err != nil || e.url == "" || loopback.Host(u.Hostname()) {
			continue
		}
		if u.Scheme != "https" {
			return fmt.Errorf("%s: plain http only to a loopback host (localhost, 127.0.0.1, ::1); use https", e.name)
		}
		if e.skip {
			return fmt.Errorf("%s, %s: certificates go unverified only to a loopback host (%s)", e.skipName, e.name, e.instead)
		}
	}
	return nil
}

// PickupSettings are the settings pickup/function.json names as %SETTING%:
// the host does not run a function one of which does not resolve, whatever
// default the handler has for it.
var PickupSettings = []string{"COSMOS_DATABASE", "COSMOS_OPERATIONS_CONTAINER", "COSMOS_LEASES_CONTAINER"}

// pickupRuns tells from the app's settings whether the host runs the
// pickup function.
func pickupRuns(getenv func(string) string) bool {
	for _, name := range PickupSettings {
		if strings.TrimSpace(getenv(name)) == "" {
			return false
		}
	}
	if strings.TrimSpace(getenv("COSMOS")) == "" && strings.TrimSpace(getenv("COSMOS__accountEndpoint")) == "" {
		return false
	}
	// The host reads both names: Linux app settings cannot hold dots
	// (WebJobs FunctionIndexer.IsDisabled).
	for _, name := range []string{"AzureWebJobs.pickup.Disabled", "AzureWebJobs_pickup_Disabled"} {
		if v := strings.TrimSpace(getenv(name)); strings.EqualFold(v, "true") || v == "1" {
			return false
		}
	}
	return true
}

// reader keeps the first error so Load reads like the settings table.
type reader struct {
	getenv func(string) string
	err    error
}

func (r *reader) fail(name, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
}

func (r *reader) required(name string) string {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		r.fail(name, "required setting is missing")
	}
	return v
}

func (r *reader) or(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

func (r *reader) bool(name string) bool {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "%q is not true or false", v)
	}
	return b
}

func (r *reader) schedule(name, def string) schedule.Schedule {
	s, err := schedule.Parse(r.or(name, def))
	if err != nil {
		r.fail(name, "%v", err)
	}
	return s
}

// deadline reads a positive duration ("90m", "12h"), or "none" for no
// deadline.
func (r *reader) deadline(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(r.getenv(name))
	switch v {
	case "":
		return def
	case "none":
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, "%q is not a positive duration (such as 90m or 12h) or none", v)
	}
	return d
}

// duration reads an optional positive Go duration of at most max.
func (r *reader) duration(name string, def, max time.Duration) time.Duration {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > max {
		r.fail(name, "%q is not a positive duration (such as 30s) of at most %s", v, max)
	}
	return d
}

// location reads a required Azure region name as billing records it:
// lowercase letters and digits, starting with a letter ("eastus",
// "westus2"), not a display name such as "East US".
func (r *reader) location(name string) string {
	v := r.required(name)
	if v == "" {
		return ""
	}
	for i, c := range v {
		if !(c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			r.fail(name, "%q is not an Azure region name (lowercase letters and digits, such as eastus)", v)
			return ""
		}
	}
	return v
}

// maxPartitionKeyBytes is the longest partition key value Cosmos DB
// takes, in bytes of UTF-8.
const maxPartitionKeyBytes = 2048

// partitionKey reads an optional partition key value: UTF-8 text of at
// most maxPartitionKeyBytes without control characters, taken as it is
// (keys are case-sensitive).
func (r *reader) partitionKey(name string) string {
	v := strings.TrimSpace(r.getenv(name))
	if !utf8.ValidString(v) || len(v) > maxPartitionKeyBytes || strings.ContainsFunc(v, unicode.IsControl) {
		r.fail(name, "%.80q is not a partition key value (UTF-8 text of at most %d bytes without control characters)", v, maxPartitionKeyBytes)
		return ""
	}
	return v
}

// count reads a whole number from 1 to max.
func (r *reader) count(name string, def, max int) int {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		r.fail(name, "%q is not a whole number from 1 to %d", v, max)
	}
	return n
}

// url reads an absolute http(s) URL; the value is not echoed in errors since
// it may carry credentials.
func (r *reader) url(name string, required bool) string {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		if required {
			r.fail(name, "required setting is missing")
		}
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		r.fail(name, "must be an absolute http(s) URL without credentials")
		return ""
	}
	return strings.TrimRight(v, "/")
}

// keyVaultReference starts an app setting the platform did not resolve: it
// leaves the reference's own text in place.
const keyVaultReference = "@Microsoft.KeyVault("

// certificates reads PEM certificates: one or more CERTIFICATE blocks,
// every one of which parses. Text around the blocks (openssl's subject
// lines) is allowed; the value is never echoed.
func (r *reader) certificates(name string) []*x509.Certificate {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return nil
	}
	if strings.HasPrefix(v, keyVaultReference) {
		r.fail(name, "a Key Vault reference the platform did not resolve (the identity's access to the secret, keyVaultReferenceIdentity)")
		return nil
	}
	var certs []*x509.Certificate
	begin := []byte("-----BEGIN ")
	rest := []byte(v)
	for n := 1; ; n++ {
		// Each block is decoded alone: pem.Decode skips a block it cannot
		// decode and returns the next.
		i := bytes.Index(rest, begin)
		if i < 0 {
			break
		}
		end := len(rest)
		if j := bytes.Index(rest[i+1:], begin); j >= 0 {
			end = i + 1 + j
		}
		block, _ := pem.Decode(rest[i:end])
		rest = rest[end:]
		switch {
		case block == nil:
			r.fail(name, "PEM block %d does not decode", n)
			return nil
		case block.Type != "CERTIFICATE":
			r.fail(name, "PEM block %d is %.40q, not a CERTIFICATE", n, block.Type)
			return nil
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			r.fail(name, "certificate %d does not parse: %v", n, err)
			return nil
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		r.fail(name, "holds no PEM certificate")
	}
	return certs
}

// audience reads the audience of an Entra token: an application ID URI
// (api://…, https://…) or an application's client ID, not a scope.
func (r *reader) audience(name string) string {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return ""
	}
	if strings.HasSuffix(v, "/.default") {
		r.fail(name, "%q is a scope; give the audience, without /.default", v)
		return ""
	}
	u, err := url.Parse(v)
	switch {
	case strings.ContainsFunc(v, unicode.IsSpace) || strings.ContainsAny(v, "?#"):
	case err == nil && u.Scheme != "" && u.Opaque == "" && u.Host != "" && u.User == nil:
		if azureHost(strings.ToLower(u.Hostname())) {
			r.fail(name, "%.80q is the audience of an Azure service: whatever answers at CLUSTER_SERVICE_URL would get a token for it; give Cluster Service's own (api://…)", v)
			return ""
		}
		return v
	case isGUID(v):
		if app, ok := azureApps[strings.ToLower(v)]; ok {
			r.fail(name, "%s is the client ID of %s: whatever answers at CLUSTER_SERVICE_URL would get a token for it; give Cluster Service's own", v, app)
			return ""
		}
		return v
	}
	r.fail(name, "%.80q is not an application ID URI (such as api://cluster-service) or a client ID", v)
	return ""
}

// azureDomains hold the audiences of Azure's own services, in every cloud
// (Cosmos DB, Key Vault, Storage, ARM, Monitor, Microsoft Graph): a token
// for one of them is good for the identity's data or secrets there.
var azureDomains = map[string]bool{
	"azure.com": true, "azure.net": true, "windows.net": true, "microsoft.com": true,
	"azure.us": true, "usgovcloudapi.net": true, "azure.cn": true, "chinacloudapi.cn": true,
}

// azureApps are the client IDs of Azure's own applications that an
// audience may name instead of their URIs.
var azureApps = map[string]string{
	"797f4846-ba00-4fd7-ba43-dac1f8f63013": "Azure Resource Manager",
	"cfa8b339-82a2-471a-a3c9-0fc0be7a4093": "Azure Key Vault",
	"e406a681-f3d4-42a8-90b6-c2b029497af1": "Azure Storage",
	"00000003-0000-0000-c000-000000000000": "Microsoft Graph",
}

// azureHost reports whether host is one of azureDomains or under one.
func azureHost(host string) bool {
	host = strings.TrimSuffix(host, ".")
	for {
		if azureDomains[host] {
			return true
		}
		_, parent, ok := strings.Cut(host, ".")
		if !ok {
			return false
		}
		host = parent
	}
}

// hosts reads a comma-separated list of DNS host names, lowercased. An IP
// address or a single label (localhost) is refused: each entry admits its
// subdomains, so it names a domain someone owns.
func (r *reader) hosts(name string) []string {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return nil
	}
	var out []string
	for h := range strings.SplitSeq(v, ",") {
		h = strings.ToLower(strings.TrimSpace(h))
		if !isHostName(h) {
			r.fail(name, "%.80q is not a host name with a domain (such as management.azure.com)", h)
			return nil
		}
		out = append(out, h)
	}
	return out
}

// isHostName reports whether h is a DNS name of two labels or more, the
// last not a number (so not an IPv4 address in any spelling): letters,
// digits and hyphens, at most 63 bytes a label, 253 in all.
func isHostName(h string) bool {
	labels := strings.Split(h, ".")
	if len(h) > 253 || len(labels) < 2 {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.ContainsFunc(last, func(c rune) bool { return c >= 'a' && c <= 'z' })
}

// isGUID reports whether v is a GUID in its 8-4-4-4-12 hexadecimal form.
func isGUID(v string) bool {
	if len(v) != 36 {
		return false
	}
	for i, c := range v {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !unicode.Is(unicode.ASCII_Hex_Digit, c) {
				return false
			}
		}
	}
	return true
}

// DefaultFunctionTimeout is the host's functionTimeout when host.json does
// not set one: the Consumption plan's default, the shortest of the plans.
const DefaultFunctionTimeout = 5 * time.Minute

// FunctionTimeout reads functionTimeout from the host's host.json: the host
// kills the handler process when an invocation runs longer, so scan and
// poll bound their work well inside it. A missing value is
// DefaultFunctionTimeout, and so is "-1" (no limit), so that the bounds
// stay finite.
func FunctionTimeout(hostJSON []byte) (time.Duration, error) {
	var host struct {
		FunctionTimeout *string `json:"functionTimeout"`
	}
	if err := json.Unmarshal(hostJSON, &host); err != nil {
		return 0, fmt.Errorf("host.json: %w", err)
	}
	if host.FunctionTimeout == nil || strings.TrimSpace(*host.FunctionTimeout) == "-1" {
		return DefaultFunctionTimeout, nil
	}
	d, ok := schedule.ParseTimeSpan(strings.TrimSpace(*host.FunctionTimeout))
	if !ok || d <= 0 {
		return 0, fmt.Errorf("host.json: functionTimeout %q is not a positive TimeSpan", *host.FunctionTimeout)
	}
	return d, nil
}
