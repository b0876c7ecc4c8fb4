package deploy

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/opstatus/opstatus/internal/config"
)

// builtInRoles are the built-in roles the template may assign, by name, with
// the GUIDs Microsoft documents: Azure RBAC's built-in roles
// (learn.microsoft.com/azure/role-based-access-control/built-in-roles) and
// Cosmos DB's data-plane built-in roles
// (learn.microsoft.com/azure/cosmos-db/how-to-setup-rbac#built-in-role-definitions).
var builtInRoles = map[string]string{
	"Storage Blob Data Owner":             "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
	"Storage Queue Data Contributor":      "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
	"Storage Table Data Contributor":      "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
	"Monitoring Metrics Publisher":        "3913510d-42f4-4e42-8a64-420c390055eb",
	"Key Vault Secrets User":              "4633458b-17de-408a-b874-0445c86b69e6",
	"Cosmos DB Built-in Data Contributor": "00000000-0000-0000-0000-000000000002",
}

// cosmosRoles are the builtInRoles that are Cosmos DB data-plane roles
// (sqlRoleDefinitions of the account), not Azure RBAC roles.
var cosmosRoles = map[string]bool{"Cosmos DB Built-in Data Contributor": true}

// roleName returns the built-in role of a GUID.
func roleName(guid string) (string, bool) {
	for name, g := range builtInRoles {
		if strings.EqualFold(g, guid) {
			return name, true
		}
	}
	return "", false
}

// grant is a role given to a principal on a scope.
type grant struct {
	role, scope, principal string
}

// grants lists every role assignment of a deployment, Azure RBAC and Cosmos
// DB data plane alike, checking that each names a built-in role by the GUID
// Microsoft gives it.
func grants(d *armeval.Deployment) ([]grant, error) {
	var out []grant
	for _, r := range d.ByType("Microsoft.Authorization/roleAssignments") {
		def, _ := armeval.Path(r.Body, "properties", "roleDefinitionId").(string)
		prefix := "/subscriptions/" + d.Scope.Subscription + "/providers/Microsoft.Authorization/roleDefinitions/"
		if !strings.HasPrefix(def, prefix) {
			return nil, fmt.Errorf("role assignment %s: roleDefinitionId %q is not a built-in role definition of the subscription", r.Name, def)
		}
		name, ok := roleName(strings.TrimPrefix(def, prefix))
		if !ok || cosmosRoles[name] {
			return nil, fmt.Errorf("role assignment %s: %s is not a built-in Azure role these checks know", r.Name, strings.TrimPrefix(def, prefix))
		}
		desc, _ := armeval.Path(r.Body, "properties", "description").(string)
		if !strings.HasPrefix(desc, name+":") {
			return nil, fmt.Errorf("role assignment %s: its description %q does not name its role, %s (%s)", r.Name, desc, name, builtInRoles[name])
		}
		principal, _ := armeval.Path(r.Body, "properties", "principalId").(string)
		if t := armeval.Path(r.Body, "properties", "principalType"); t != "ServicePrincipal" {
			return nil, fmt.Errorf("role assignment %s: principalType %v, want ServicePrincipal (a managed identity)", r.Name, t)
		}
		if r.Scope == "" {
			return nil, fmt.Errorf("role assignment %s: no scope: it would apply to the whole resource group", r.Name)
		}
		out = append(out, grant{role: name, scope: r.Scope, principal: principal})
	}
	for _, r := range d.ByType("Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments") {
		account := strings.TrimSuffix(r.ID, "/sqlRoleAssignments/"+r.Name[strings.LastIndex(r.Name, "/")+1:])
		def, _ := armeval.Path(r.Body, "properties", "roleDefinitionId").(string)
		guid, ok := strings.CutPrefix(def, account+"/sqlRoleDefinitions/")
		if !ok {
			return nil, fmt.Errorf("sql role assignment %s: roleDefinitionId %q is not a role of its own account %s", r.Name, def, account)
		}
		name, ok := roleName(guid)
		if !ok || !cosmosRoles[name] {
			return nil, fmt.Errorf("sql role assignment %s: %s is not a Cosmos DB built-in data-plane role these checks know", r.Name, guid)
		}
		scope, _ := armeval.Path(r.Body, "properties", "scope").(string)
		principal, _ := armeval.Path(r.Body, "properties", "principalId").(string)
		out = append(out, grant{role: name, scope: scope, principal: principal})
	}
	return out, nil
}

// checkRoleGUIDs checks that every role GUID the template holds is the
// built-in role its name says: the roles variable's names and every
// assignment's role definition and description.
func checkRoleGUIDs(d *armeval.Deployment) error {
	roles, ok := d.Variables["roles"].(map[string]any)
	if !ok {
		return fmt.Errorf("variable roles: not an object of role names to GUIDs")
	}
	for name, guid := range roles {
		want, known := builtInRoles[name]
		if !known {
			return fmt.Errorf("variable roles: %q is not a built-in role these checks know", name)
		}
		if !strings.EqualFold(fmt.Sprint(guid), want) {
			return fmt.Errorf("variable roles: %s is %v, but that role's GUID is %s", name, guid, want)
		}
	}
	_, err := grants(d)
	return err
}

// identity returns the ID of the app's user-assigned identity: the one the
// site runs as.
func identity(d *armeval.Deployment) (string, error) {
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return "", err
	}
	if t := armeval.Path(site.Body, "identity", "type"); t != "UserAssigned" {
		return "", fmt.Errorf("site identity type %v, want UserAssigned alone", t)
	}
	ids, _ := armeval.Path(site.Body, "identity", "userAssignedIdentities").(map[string]any)
	if len(ids) != 1 {
		return "", fmt.Errorf("site has %d user-assigned identities, want 1", len(ids))
	}
	var id string
	for k := range ids {
		id = k
	}
	if t, _ := armeval.ResourceType(id); t != "Microsoft.ManagedIdentity/userAssignedIdentities" {
		return "", fmt.Errorf("site identity %s is not a user-assigned identity", id)
	}
	created := d.ByType("Microsoft.ManagedIdentity/userAssignedIdentities")
	if len(created) != 1 || !strings.EqualFold(created[0].ID, id) {
		return "", fmt.Errorf("site identity %s is not the one identity the template creates", id)
	}
	return id, nil
}

// hostStorage returns the ID of the storage account the host's connection
// names.
func hostStorage(d *armeval.Deployment, settings map[string]string, connection string) (string, error) {
	name := settings[connection+"__accountName"]
	for _, r := range d.ByType("Microsoft.Storage/storageAccounts") {
		if r.Name == name {
			return r.ID, nil
		}
	}
	return "", fmt.Errorf("%s__accountName %q is not a storage account of the template", connection, name)
}

// keyVaultReference matches the app-setting form of a Key Vault reference
// that names the vault and secret (learn.microsoft.com/azure/app-service/app-service-key-vault-references).
var keyVaultReference = regexp.MustCompile(`^@Microsoft\.KeyVault\(VaultName=([0-9A-Za-z-]+);SecretName=([0-9A-Za-z-]+)\)$`)

// keyVaultSecrets returns, for every setting that is a Key Vault reference,
// the vault and secret it names ("vaults/<vault>/secrets/<secret>").
func keyVaultSecrets(settings map[string]string) map[string]string {
	out := map[string]string{}
	for name, v := range settings {
		if m := keyVaultReference.FindStringSubmatch(v); m != nil {
			out[name] = "vaults/" + m[1] + "/secrets/" + m[2]
		}
	}
	return out
}

// checkGrants checks that the app's identity has exactly the roles it
// needs, each on the resource its connection uses, and nothing more: the
// host's storage account (blobs, queues and the host's diagnostic events
// table), the Application Insights component its telemetry goes to, the
// Cosmos DB database of COSMOS_ENDPOINT and COSMOS_DATABASE, and each Key
// Vault secret a setting refers to.
func checkGrants(d *armeval.Deployment) error {
	id, err := identity(d)
	if err != nil {
		return err
	}
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	storage, err := hostStorage(d, settings, "AzureWebJobsStorage")
	if err != nil {
		return err
	}
	insights, ok := strings.CutPrefix(settings["APPLICATIONINSIGHTS_CONNECTION_STRING"], "connectionString(")
	if !ok {
		return fmt.Errorf("APPLICATIONINSIGHTS_CONNECTION_STRING is not the connection string of a component of the template")
	}
	insights = strings.TrimSuffix(insights, ")")
	cosmos, err := cosmosAccount(d, "COSMOS_ENDPOINT", settings["COSMOS_ENDPOINT"])
	if err != nil {
		return err
	}
	// The host's Cosmos DB connections (pickup's change feed and its
	// leases) are on the same account: its role covers them.
	for name, v := range settings {
		if !strings.HasSuffix(name, "__accountEndpoint") {
			continue
		}
		account, err := cosmosAccount(d, name, v)
		if err != nil {
			return err
		}
		if account != cosmos {
			return fmt.Errorf("%s is the endpoint of %s, not of COSMOS_ENDPOINT's account %s", name, account, cosmos)
		}
	}
	principal := "principalId(" + id + ")"
	want := []grant{
		{"Storage Blob Data Owner", storage, principal},
		{"Storage Queue Data Contributor", storage, principal},
		{"Storage Table Data Contributor", storage, principal},
		{"Monitoring Metrics Publisher", insights, principal},
	}
	// The roles in the resource provider's groups may be left to its own
	// IaC, which then gives them to the identityPrincipalId output.
	// Cosmos DB's data role is on the containers opstatus uses, not on the
	// database, which holds the frontend's own too.
	if d.Params["assignCosmosRole"] != false {
		for _, name := range []string{"COSMOS_OPERATIONS_CONTAINER", "COSMOS_RESOURCES_CONTAINER", "COSMOS_LOCKS_CONTAINER", "COSMOS_BILLING_CONTAINER", "COSMOS_LEASES_CONTAINER"} {
			if settings[name] == "" {
				return fmt.Errorf("%s is not set: the Cosmos DB role's containers are the ones the settings name", name)
			}
			want = append(want, grant{"Cosmos DB Built-in Data Contributor", cosmos + "/dbs/" + settings["COSMOS_DATABASE"] + "/colls/" + settings[name], principal})
		}
	}
	// Metrics pushed to a data collection rule need Monitoring Metrics
	// Publisher on that rule.
	if rw := settings["METRICS_REMOTE_WRITE_URL"]; rw != "" {
		dcr, ok := remoteWriteRule(rw)
		if !ok {
			return fmt.Errorf("METRICS_REMOTE_WRITE_URL %s is not the write URL of a data collection rule of the template", rw)
		}
		want = append(want, grant{"Monitoring Metrics Publisher", dcr, principal})
	}
	got, err := grants(d)
	if err != nil {
		return err
	}
	// A vault's resource group is not in its reference: the grant is the
	// one on a secret of that vault and name.
	for name, secret := range keyVaultSecrets(settings) {
		if d.Params["assignKeyVaultRole"] == false {
			break
		}
		found := false
		for _, g := range got {
			if g.role == "Key Vault Secrets User" && strings.HasSuffix(strings.ToLower(g.scope), strings.ToLower("/providers/Microsoft.KeyVault/"+secret)) {
				want = append(want, grant{g.role, g.scope, principal})
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%s refers to Key Vault secret %s, on which the identity is given no Key Vault Secrets User", name, secret)
		}
	}
	key := func(g grant) string { return strings.ToLower(g.role + " on " + g.scope + " to " + g.principal) }
	var gotKeys, wantKeys []string
	for _, g := range got {
		gotKeys = append(gotKeys, key(g))
	}
	for _, g := range want {
		wantKeys = append(wantKeys, key(g))
	}
	sort.Strings(gotKeys)
	sort.Strings(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		return fmt.Errorf("role assignments:\n  %s\nwant exactly:\n  %s", strings.Join(gotKeys, "\n  "), strings.Join(wantKeys, "\n  "))
	}
	return nil
}

// remoteWriteRule returns the ID of the data collection rule whose
// Prometheus remote-write URL rw is: the rule's immutable ID, in the path
// Azure Monitor documents, on its endpoint's metrics ingestion host.
func remoteWriteRule(rw string) (string, bool) {
	u, err := url.Parse(rw)
	if err != nil || u.Scheme != "https" || !strings.HasSuffix(u.Host, ".metrics.ingest.monitor.azure.com") || u.Query().Get("api-version") != "2023-04-24" {
		return "", false
	}
	rest, ok := strings.CutPrefix(u.Path, "/dataCollectionRules/immutableId(")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, ")/streams/Microsoft-PrometheusMetrics/api/v1/write")
	return id, ok
}

// cosmosAccount returns the ID of the Cosmos DB account whose endpoint the
// setting name holds: the account the data-plane role is on, or the
// Leases container when the role is left to the resource provider's IaC,
// or, with neither in the deployment, the account the parameters name.
func cosmosAccount(d *armeval.Deployment, name, endpoint string) (string, error) {
	var accounts []string
	for _, r := range d.ByType("Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments") {
		accounts = append(accounts, r.ID[:strings.Index(r.ID, "/sqlRoleAssignments/")])
	}
	for _, r := range d.ByType("Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers") {
		accounts = append(accounts, r.ID[:strings.Index(r.ID, "/sqlDatabases/")])
	}
	if len(accounts) == 0 && d.Params["assignCosmosRole"] == false {
		accounts = append(accounts, fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.DocumentDB/databaseAccounts/%s", d.Scope.Subscription, d.Params["cosmosResourceGroup"], d.Params["cosmosAccountName"]))
	}
	for _, account := range accounts {
		_, name := armeval.ResourceType(account)
		if endpoint == "https://"+name+".documents.azure.com:443/" {
			return account, nil
		}
	}
	return "", fmt.Errorf("%s %q is not the endpoint of an account the identity is given a role on", name, endpoint)
}

// checkIdentity checks that every connection uses the identity the roles are
// given to: the host's storage and every other identity-based connection
// (<name>__credential, <name>__clientId), the deployment package,
// Application Insights, and the handler's own Azure SDK credential
// (AZURE_CLIENT_ID).
func checkIdentity(d *armeval.Deployment) error {
	id, err := identity(d)
	if err != nil {
		return err
	}
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	clientID := "clientId(" + id + ")"
	wants := map[string]string{
		"AZURE_CLIENT_ID":                           clientID,
		"AzureWebJobsStorage__clientId":             clientID,
		"AzureWebJobsStorage__credential":           "managedidentity",
		"APPLICATIONINSIGHTS_AUTHENTICATION_STRING": "Authorization=AAD;ClientId=" + clientID,
	}
	for name := range settings {
		switch {
		case strings.HasSuffix(name, "__clientId"):
			wants[name] = clientID
		case strings.HasSuffix(name, "__credential"):
			wants[name] = "managedidentity"
		}
	}
	for name, want := range wants {
		if got := settings[name]; got != want {
			return fmt.Errorf("%s is %q, want %q: the identity the roles are given to", name, got, want)
		}
	}
	site, _ := d.One("Microsoft.Web/sites")
	if got := armeval.Path(site.Body, "properties", "keyVaultReferenceIdentity"); !strings.EqualFold(fmt.Sprint(got), id) {
		return fmt.Errorf("keyVaultReferenceIdentity is %v, not the app's identity %s: Key Vault references would resolve as another identity", got, id)
	}
	auth := armeval.Path(site.Body, "properties", "functionAppConfig", "deployment", "storage", "authentication")
	if t := armeval.Path(auth, "type"); t != "UserAssignedIdentity" {
		return fmt.Errorf("deployment storage authentication %v, want UserAssignedIdentity", t)
	}
	if got := armeval.Path(auth, "userAssignedIdentityResourceId"); !strings.EqualFold(fmt.Sprint(got), id) {
		return fmt.Errorf("deployment storage authenticates as %v, not the app's identity %s", got, id)
	}
	if armeval.Path(auth, "storageAccountConnectionStringName") != nil {
		return fmt.Errorf("deployment storage names a connection string setting")
	}
	gs, err := grants(d)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if g.principal != "principalId("+id+")" {
			return fmt.Errorf("%s on %s is given to %q, not the app's identity %s", g.role, g.scope, g.principal, id)
		}
	}
	// The resource provider's IaC gives the roles left to it to this.
	if out, err := d.Output("identityPrincipalId"); err != nil || out != "principalId("+id+")" {
		return fmt.Errorf("output identityPrincipalId is %v (%v), not the principal of the app's identity %s: the resource provider's IaC could not grant it the roles left to it", out, err, id)
	}
	return nil
}

// function is one function.json of the app.
type function struct {
	name     string
	raw      string
	bindings []map[string]any
}

// readFunctions reads every function.json of the app.
func readFunctions() ([]function, error) {
	files, err := filepath.Glob(filepath.Join("..", "*", "function.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no function.json found: %v", err)
	}
	var out []function
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		doc, err := armeval.DecodeJSON(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		fn := function{name: filepath.Base(filepath.Dir(f)), raw: string(b)}
		list, _ := doc["bindings"].([]any)
		for _, b := range list {
			m, _ := b.(map[string]any)
			fn.bindings = append(fn.bindings, m)
		}
		out = append(out, fn)
	}
	return out, nil
}

// deprecatedOnFlex are the app settings the Flex Consumption plan replaces
// with site properties (learn.microsoft.com/azure/azure-functions/functions-app-settings#flex-consumption-plan-deprecations).
var deprecatedOnFlex = []string{
	"ENABLE_ORYX_BUILD", "FUNCTIONS_EXTENSION_VERSION", "FUNCTIONS_WORKER_RUNTIME",
	"FUNCTIONS_WORKER_RUNTIME_VERSION", "FUNCTIONS_MAX_HTTP_CONCURRENCY", "FUNCTIONS_WORKER_PROCESS_COUNT",
	"FUNCTIONS_WORKER_DYNAMIC_CONCURRENCY_ENABLED", "SCM_DO_BUILD_DURING_DEPLOYMENT",
	"WEBSITE_CONTENTAZUREFILECONNECTIONSTRING", "WEBSITE_CONTENTOVERVNET", "WEBSITE_CONTENTSHARE",
	"WEBSITE_DNS_SERVER", "WEBSITE_MAX_DYNAMIC_APPLICATION_SCALE_OUT", "WEBSITE_NODE_DEFAULT_VERSION",
	"WEBSITE_RUN_FROM_PACKAGE", "WEBSITE_SKIP_CONTENTSHARE_VALIDATION", "WEBSITE_VNET_ROUTE_ALL",
}

var settingRef = regexp.MustCompile(`%([A-Za-z0-9_]+)%`)

// checkSettings checks that the app has every setting the handler and its
// bindings need: the handler's own configuration loads from them as it
// would at start; every %SETTING% a function.json names is set; each
// binding's connection is identity-based (a storage account by
// __accountName, a Cosmos DB account by __accountEndpoint); nothing the
// Flex plan replaces is set.
func checkSettings(d *armeval.Deployment, fns []function) error {
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	env := handlerEnv(settings)
	if _, err := config.Load(func(k string) string { return env[k] }); err != nil {
		return fmt.Errorf("the handler would not start with these settings: %w", err)
	}
	for _, name := range []string{"COSMOS_ENDPOINT", "COSMOS_DATABASE", "CLUSTER_SERVICE_URL", "AZURE_LOCATION", "CLUSTER_SERVICE_MAX_IN_FLIGHT", "AZURE_CLIENT_ID", "AzureWebJobsStorage__tableServiceUri"} {
		if settings[name] == "" {
			return fmt.Errorf("%s is not set", name)
		}
	}
	for _, fn := range fns {
		for _, m := range settingRef.FindAllStringSubmatch(fn.raw, -1) {
			if settings[m[1]] == "" {
				return fmt.Errorf("%s/function.json reads %%%s%%, which is not set: the host would not run %s", fn.name, m[1], fn.name)
			}
		}
		for _, b := range fn.bindings {
			conn, ok := b["connection"].(string)
			if !ok {
				continue
			}
			account := "__accountName"
			if typ, _ := b["type"].(string); strings.EqualFold(typ, "cosmosDBTrigger") {
				account = "__accountEndpoint"
			}
			if _, plain := settings[conn]; plain {
				return fmt.Errorf("%s: setting %s is a connection string; use %s%s with an identity", fn.name, conn, conn, account)
			}
			if settings[conn+account] == "" || settings[conn+"__credential"] != "managedidentity" || settings[conn+"__clientId"] == "" {
				return fmt.Errorf("%s: connection %s needs %s%s, %s__credential=managedidentity and %s__clientId", fn.name, conn, conn, account, conn, conn)
			}
		}
	}
	for _, name := range deprecatedOnFlex {
		if _, ok := settings[name]; ok {
			return fmt.Errorf("%s is not used on Flex Consumption (functionAppConfig replaces it)", name)
		}
	}
	return nil
}

// checkBindings checks that the names the bindings and host.json use are
// the ones the template creates: one queue for every queue binding, with
// its poison queue, in the host's storage account; the deployment container
// the package is read from; and the custom handler and extension bundle
// that Flex Consumption runs.
func checkBindings(d *armeval.Deployment, fns []function, hostJSON map[string]any) error {
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	queues := map[string]bool{}
	for _, fn := range fns {
		for _, b := range fn.bindings {
			typ, _ := b["type"].(string)
			if typ != "queue" && typ != "queueTrigger" {
				continue
			}
			q, _ := b["queueName"].(string)
			conn, _ := b["connection"].(string)
			if conn != "AzureWebJobsStorage" {
				return fmt.Errorf("%s binding %v uses connection %q; the template gives roles on AzureWebJobsStorage's account only", fn.name, b["name"], conn)
			}
			queues[q] = true
		}
	}
	if len(queues) != 1 {
		return fmt.Errorf("the bindings use queues %v; the template is written for one", queues)
	}
	storage, err := hostStorage(d, settings, "AzureWebJobsStorage")
	if err != nil {
		return err
	}
	var want []string
	for q := range queues {
		want = append(want, storage+"/queueServices/default/queues/"+q, storage+"/queueServices/default/queues/"+q+"-poison")
	}
	var got []string
	for _, r := range d.ByType("Microsoft.Storage/storageAccounts/queueServices/queues") {
		got = append(got, r.ID)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.EqualFunc(got, want, strings.EqualFold) {
		return fmt.Errorf("queues created %v, want %v (the bindings' queue and its poison queue)", got, want)
	}

	site, _ := d.One("Microsoft.Web/sites")
	pkg, _ := armeval.Path(site.Body, "properties", "functionAppConfig", "deployment", "storage", "value").(string)
	u, err := url.Parse(pkg)
	if err != nil || u.Scheme != "https" {
		return fmt.Errorf("deployment storage %q is not an https URL", pkg)
	}
	_, account := armeval.ResourceType(storage)
	container := strings.Trim(u.Path, "/")
	if u.Host != account+".blob.core.windows.net" || strings.Contains(container, "/") {
		return fmt.Errorf("deployment storage %q is not a container of the host's storage account %s", pkg, account)
	}
	found := false
	for _, r := range d.ByType("Microsoft.Storage/storageAccounts/blobServices/containers") {
		found = found || strings.EqualFold(r.ID, storage+"/blobServices/default/containers/"+container)
	}
	if !found {
		return fmt.Errorf("deployment container %s is not created in %s", container, account)
	}

	if exe := armeval.Path(hostJSON, "customHandler", "description", "defaultExecutablePath"); exe != "handler" {
		return fmt.Errorf("host.json runs %v, not the custom handler binary", exe)
	}
	if v := armeval.Path(hostJSON, "extensionBundle", "version"); v != "[4.*, 5.0.0)" {
		return fmt.Errorf("host.json extension bundle %v; Flex Consumption needs [4.0.0, 5.0.0) or later", v)
	}
	return nil
}

// secretText is text no template or parameters file may hold: keys,
// connection strings and the settings that carry them.
var secretText = []string{
	"AccountKey=", "DefaultEndpointsProtocol", "AccountEndpoint=", "UseDevelopmentStorage",
	"SharedAccessSignature", "SharedAccessKey", "InstrumentationKey", "StorageAccountConnectionString",
	"COSMOS_KEY", "ClientSecret", "password", "securestring", "secureobject",
}

// notCredentials are settings whose names look like credentials but are
// not: a partition name and the address tokens are asked at.
var notCredentials = map[string]bool{"COSMOS_OPERATIONS_PARTITION_KEY": true, "CLUSTER_SERVICE_TOKEN_URL": true}

// listCall matches ARM's list* functions (listKeys, listConnectionStrings,
// listSecrets, ...), which read secrets at deployment.
var listCall = regexp.MustCompile(`(?i)\blist[a-z]*\s*\(`)

// secretName matches setting names that hold credentials.
var secretName = regexp.MustCompile(`(?i)key|secret|password|token|connection_?string|sas\b`)

// checkNoSecrets checks that no key, connection string or secret is
// created, read or set anywhere, and that the services accept nothing but
// Microsoft Entra identities: Storage without shared keys, Application
// Insights and its workspace without local auth, no basic-auth publishing.
func checkNoSecrets(texts map[string]string, d *armeval.Deployment) error {
	for file, text := range texts {
		lower := strings.ToLower(text)
		for _, s := range secretText {
			if strings.Contains(lower, strings.ToLower(s)) {
				return fmt.Errorf("%s holds %q", file, s)
			}
		}
		if m := listCall.FindString(text); m != "" {
			return fmt.Errorf("%s calls %s...): a list function reads keys", file, m)
		}
	}
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	references := keyVaultSecrets(settings)
	for name, value := range settings {
		if !secretName.MatchString(name) || notCredentials[name] {
			continue
		}
		// A Key Vault reference holds no secret (the platform reads it
		// as the identity), and an empty setting none either.
		if _, ok := references[name]; ok || value == "" {
			continue
		}
		// The connection string of a component without local auth names
		// where telemetry goes; sending needs an Entra token.
		if name != "APPLICATIONINSIGHTS_CONNECTION_STRING" || !strings.HasPrefix(value, "connectionString(") {
			return fmt.Errorf("setting %s looks like a credential and is not a Key Vault reference", name)
		}
	}
	for _, r := range d.ByType("Microsoft.Storage/storageAccounts") {
		if v := armeval.Path(r.Body, "properties", "allowSharedKeyAccess"); v != false {
			return fmt.Errorf("storage account %s: allowSharedKeyAccess %v, want false", r.Name, v)
		}
	}
	for _, r := range d.ByType("Microsoft.Insights/components") {
		if v := armeval.Path(r.Body, "properties", "DisableLocalAuth"); v != true {
			return fmt.Errorf("Application Insights %s: DisableLocalAuth %v, want true", r.Name, v)
		}
	}
	for _, r := range d.ByType("Microsoft.OperationalInsights/workspaces") {
		if v := armeval.Path(r.Body, "properties", "features", "disableLocalAuth"); v != true {
			return fmt.Errorf("workspace %s: features.disableLocalAuth %v, want true", r.Name, v)
		}
	}
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	off := map[string]bool{}
	for _, r := range d.ByType("Microsoft.Web/sites/basicPublishingCredentialsPolicies") {
		if armeval.Path(r.Body, "properties", "allow") == false && strings.HasPrefix(r.Name, site.Name+"/") {
			off[strings.TrimPrefix(r.Name, site.Name+"/")] = true
		}
	}
	if !off["scm"] || !off["ftp"] {
		return fmt.Errorf("basic-auth publishing credentials must be off for scm and ftp, off: %v", off)
	}
	return nil
}

// bound is what the app-wide bound on Cluster Service is made of.
type bound struct {
	// perProcess is CLUSTER_SERVICE_MAX_IN_FLIGHT, each process's ceiling,
	// and budget CLUSTER_SERVICE_BUDGET, shared through the ledger.
	perProcess, budget int64
}

// perCore is the ceiling for each core of an instance when
// clusterServiceMaxInFlight is 0.
const perCore = 256

// removedSettings fed the static split of the budget by instance counts,
// which the ledger replaced: the handler reads them no more, and a
// template that still sets them says something untrue.
var removedSettings = []string{"MAXIMUM_INSTANCE_COUNT", "PICKUP_MAXIMUM_INSTANCE_COUNT"}

// clusterServiceBound reads the bound from a deployment: the ceiling and
// the budget as the parameters state them.
func clusterServiceBound(d *armeval.Deployment) (bound, error) {
	var b bound
	settings, err := appSettings(d)
	if err != nil {
		return b, err
	}
	if b.perProcess, err = strconv.ParseInt(settings["CLUSTER_SERVICE_MAX_IN_FLIGHT"], 10, 64); err != nil {
		return b, fmt.Errorf("CLUSTER_SERVICE_MAX_IN_FLIGHT %q is not set to a number: the handler would use its default", settings["CLUSTER_SERVICE_MAX_IN_FLIGHT"])
	}
	if b.budget, err = strconv.ParseInt(settings["CLUSTER_SERVICE_BUDGET"], 10, 64); err != nil {
		return b, fmt.Errorf("CLUSTER_SERVICE_BUDGET %q is not set to a number: the app would have no bound", settings["CLUSTER_SERVICE_BUDGET"])
	}
	return b, nil
}

// pickupRuns tells whether the host runs pickup with these settings, as
// the handler reads the host's rule.
func pickupRuns(settings map[string]string) (bool, error) {
	env := handlerEnv(settings)
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		return false, fmt.Errorf("the handler would not start with these settings: %w", err)
	}
	return cfg.PickupRuns, nil
}

// checkBudget checks the app-wide bound on Cluster Service: the budget and
// each process's ceiling are the parameters' values, the ledger's container
// is named (the handler refuses a budget without it), no setting of the
// old static split is left, and the handler starts with these settings.
func checkBudget(d *armeval.Deployment) error {
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	// No longer the budget's bound, but still the bill's.
	if _, ok := armeval.Path(site.Body, "properties", "functionAppConfig", "scaleAndConcurrency", "maximumInstanceCount").(int64); !ok {
		return fmt.Errorf("functionAppConfig.scaleAndConcurrency.maximumInstanceCount is not set: Flex Consumption would allow 100 instances")
	}
	b, err := clusterServiceBound(d)
	if err != nil {
		return err
	}
	if want, ok := d.Params["clusterServiceBudget"].(int64); !ok || b.budget != want {
		return fmt.Errorf("CLUSTER_SERVICE_BUDGET is %d, not clusterServiceBudget %v", b.budget, d.Params["clusterServiceBudget"])
	}
	want, ok := d.Params["clusterServiceMaxInFlight"].(int64)
	if memory, _ := d.Params["instanceMemoryMB"].(int64); ok && want == 0 {
		// 256 a core: more keeps a quarter core CPU-bound, its lock holds
		// stretched.
		want = perCore * memory / 2048
	}
	if !ok || b.perProcess != want {
		return fmt.Errorf("CLUSTER_SERVICE_MAX_IN_FLIGHT is %d, not %d (clusterServiceMaxInFlight %v, instanceMemoryMB %v)",
			b.perProcess, want, d.Params["clusterServiceMaxInFlight"], d.Params["instanceMemoryMB"])
	}
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	for _, k := range removedSettings {
		if _, ok := settings[k]; ok {
			return fmt.Errorf("%s is set, but the handler no longer reads it: the budget is shared through the ledger", k)
		}
	}
	env := handlerEnv(settings)
	if _, err := config.Load(func(k string) string { return env[k] }); err != nil {
		return fmt.Errorf("the handler would not start with these settings: %w", err)
	}
	return nil
}

// checkAlwaysReady checks the always-ready instances the site buys: each
// entry names a function of the app as Flex names a function outside the
// http, blob and durable groups (function:<name>), at least 1 and at most
// maximumInstanceCount instances, none for a function the host does not
// run, and each function at most once.
func checkAlwaysReady(d *armeval.Deployment, fns []function) error {
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	sc := armeval.Path(site.Body, "properties", "functionAppConfig", "scaleAndConcurrency")
	limit, _ := armeval.Path(sc, "maximumInstanceCount").(int64)
	raw := armeval.Path(sc, "alwaysReady")
	if raw == nil {
		return nil
	}
	entries, ok := raw.([]any)
	if !ok {
		return fmt.Errorf("alwaysReady is %v, not a list", raw)
	}
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, e := range entries {
		name, _ := armeval.Path(e, "name").(string)
		fn, ok := strings.CutPrefix(name, "function:")
		if !ok || !slices.ContainsFunc(fns, func(f function) bool { return f.name == fn }) {
			return fmt.Errorf("alwaysReady entry %q is not function:<name> of a function of the app", name)
		}
		if seen[fn] {
			return fmt.Errorf("alwaysReady names %s twice", name)
		}
		seen[fn] = true
		n, _ := armeval.Path(e, "instanceCount").(int64)
		switch {
		case n < 1:
			return fmt.Errorf("alwaysReady entry %s has %d instances: leave it out", name, n)
		case n > limit:
			return fmt.Errorf("alwaysReady entry %s has %d instances, over maximumInstanceCount %d", name, n, limit)
		}
		if fn != "pickup" {
			continue
		}
		runs, err := pickupRuns(settings)
		if err != nil {
			return err
		}
		if !runs {
			return fmt.Errorf("alwaysReady entry %s bills %d instances of a function the host does not run", name, n)
		}
	}
	return nil
}

// checkFlex checks that the app is a custom handler on Flex Consumption:
// the plan's SKU, the site's kind and plan, and functionAppConfig's runtime.
func checkFlex(d *armeval.Deployment) error {
	plan, err := d.One("Microsoft.Web/serverfarms")
	if err != nil {
		return err
	}
	if armeval.Path(plan.Body, "sku", "name") != "FC1" || armeval.Path(plan.Body, "sku", "tier") != "FlexConsumption" || armeval.Path(plan.Body, "properties", "reserved") != true {
		return fmt.Errorf("plan %s is not a Linux Flex Consumption plan (sku FC1, tier FlexConsumption, reserved)", plan.Name)
	}
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	if site.Body["kind"] != "functionapp,linux" {
		return fmt.Errorf("site kind %v, want functionapp,linux", site.Body["kind"])
	}
	if !strings.EqualFold(fmt.Sprint(armeval.Path(site.Body, "properties", "serverFarmId")), plan.ID) {
		return fmt.Errorf("site runs on %v, not the plan %s", armeval.Path(site.Body, "properties", "serverFarmId"), plan.ID)
	}
	rt := armeval.Path(site.Body, "properties", "functionAppConfig", "runtime")
	if armeval.Path(rt, "name") != "custom" || armeval.Path(rt, "version") != "1.0" {
		return fmt.Errorf("functionAppConfig.runtime %v, want custom 1.0", rt)
	}
	if armeval.Path(site.Body, "properties", "httpsOnly") != true {
		return fmt.Errorf("site must be httpsOnly")
	}
	// Go rounds a cgroup CPU limit under 2 cores up to 2 threads of Go
	// code, and on an instance of one core or less the spare one costs
	// CPU on every network hand-off: GOMAXPROCS is the instance's cores.
	memory, _ := armeval.Normalize(armeval.Path(site.Body, "properties", "functionAppConfig", "scaleAndConcurrency", "instanceMemoryMB")).(int64)
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	if want := strconv.FormatInt(max(1, memory/2048), 10); settings["GOMAXPROCS"] != want {
		return fmt.Errorf("GOMAXPROCS is %q, want %s: the cores of a %d MB instance", settings["GOMAXPROCS"], want, memory)
	}
	return nil
}

// flexInstanceFloor is the lowest maximumInstanceCount Flex Consumption
// accepts outside a few preview regions: lowestMaximumInstanceCount of the
// custom runtime in Microsoft's Flex stack data
// (az functionapp list-flexconsumption-runtimes).
const flexInstanceFloor = 40

// checkInstanceFloor checks that the template's default instance limit is
// one every region accepts.
func checkInstanceFloor(tmpl map[string]any) error {
	def, _ := armeval.Normalize(armeval.Path(tmpl, "parameters", "maximumInstanceCount", "defaultValue")).(int64)
	if def < flexInstanceFloor {
		return fmt.Errorf("maximumInstanceCount defaults to %d, under %d, the lowest most regions accept", def, flexInstanceFloor)
	}
	return nil
}

// nameLimits are the longest names Azure accepts for the resources named
// after appName (learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules).
var nameLimits = map[string]int{
	"Microsoft.Web/sites":                              60,
	"Microsoft.Web/serverfarms":                        60,
	"Microsoft.OperationalInsights/workspaces":         63,
	"Microsoft.Insights/components":                    260,
	"Microsoft.ManagedIdentity/userAssignedIdentities": 128,
}

// storageAccountName is the form Azure gives storage account names.
var storageAccountName = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

// checkNames checks that an appName of the longest length the template
// accepts gives every resource named after it a name Azure accepts, and
// that the storage account's name has the form Azure requires.
func checkNames(d *armeval.Deployment, f fixture) error {
	for _, r := range d.ByType("Microsoft.Storage/storageAccounts") {
		if !storageAccountName.MatchString(r.Name) {
			return fmt.Errorf("storage account name %q is not 3 to 24 lowercase letters and digits", r.Name)
		}
	}
	longest, ok := armeval.Normalize(armeval.Path(f.template, "parameters", "appName", "maxLength")).(int64)
	if !ok {
		return fmt.Errorf("appName has no maxLength")
	}
	values := withValues(f.values, map[string]any{"appName": strings.Repeat("a", int(longest))})
	delete(values, "identityName")
	long, err := armeval.Resolve(f.template, values, exampleScope)
	if err != nil {
		return err
	}
	for _, r := range long.Resources {
		limit, ok := nameLimits[r.Type]
		if ok && len(r.Name) > limit {
			return fmt.Errorf("an appName of %d characters names %s %q, over its %d", longest, r.Type, r.Name, limit)
		}
	}
	return nil
}

// TestChecksFailOnBrokenCopies edits copies of the template the way a
// mistake would and sees the check of this file that guards against it
// fail.
func TestChecksFailOnBrokenCopies(t *testing.T) {
	runBrokenCopies(t, []brokenCopy{
		{
			name:  "a role GUID that is not the role its name says",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				// Storage Blob Data Contributor's GUID under Owner's name.
				variables(tmpl)["roles"].(map[string]any)["Storage Blob Data Owner"] = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
			},
			want: "Storage Blob Data Owner is ba92f5b4-2d11-453d-a403-e96b0029c9fe, but that role's GUID is b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
		},
		{
			name:  "an assignment of a role the checks do not know",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				// Storage Blob Data Contributor, written out.
				props(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Blob"))["roleDefinitionId"] = "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'ba92f5b4-2d11-453d-a403-e96b0029c9fe')]"
			},
			want: "ba92f5b4-2d11-453d-a403-e96b0029c9fe is not a built-in Azure role these checks know",
		},
		{
			name:  "an assignment described as another role",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Queue"))["description"] = "Storage Blob Data Owner: queues"
			},
			want: "does not name its role",
		},
		{
			name:  "the Cosmos DB reader role instead of the contributor",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["roles"].(map[string]any)["Cosmos DB Built-in Data Contributor"] = "00000000-0000-0000-0000-000000000001"
			},
			want: "Cosmos DB Built-in Data Contributor is 00000000-0000-0000-0000-000000000001",
		},
		{
			name:  "a role more than the identity needs",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				extra := armeval.DeepCopy(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Queue"))
				extra["name"] = "[guid('extra')]"
				props(extra)["description"] = "Monitoring Metrics Publisher: one more"
				props(extra)["roleDefinitionId"] = "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', variables('roles')['Monitoring Metrics Publisher'])]"
				tmpl["resources"] = append(tmpl["resources"].([]any), extra)
			},
			want: "want exactly",
		},
		{
			name:  "a role on the resource group instead of the storage account",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Blob"), "scope")
			},
			want: "no scope",
		},
		{
			name:  "the Cosmos DB role on the whole account",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(cosmosRoleAssignment(t, tmpl))["scope"] = "[resourceId('Microsoft.DocumentDB/databaseAccounts', parameters('accountName'))]"
			},
			want: "want exactly",
		},
		{
			name:  "the Cosmos DB role on the whole database, the frontend's containers included",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(cosmosRoleAssignment(t, tmpl))["scope"] = "[format('{0}/dbs/{1}', resourceId('Microsoft.DocumentDB/databaseAccounts', parameters('accountName')), parameters('database'))]"
			},
			want: "want exactly",
		},
		{
			name:  "the Cosmos DB role on a container opstatus does not use",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")
				armeval.Path(dep, "properties", "parameters", "dataContainers").(map[string]any)["value"] = []any{"Operations", "Resources", "Locks", "Billing", "Subscriptions"}
			},
			want: "want exactly",
		},
		{
			name:  "the Cosmos DB role missing on a container opstatus uses",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")
				armeval.Path(dep, "properties", "parameters", "dataContainers").(map[string]any)["value"] = []any{"Operations", "Resources", "Locks"}
			},
			want: "want exactly",
		},
		{
			name:  "COSMOS_ENDPOINT naming another account than the role's",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS_ENDPOINT", "[reference(resourceId(parameters('cosmosResourceGroup'), 'Microsoft.DocumentDB/databaseAccounts', 'other'), '2024-11-15').documentEndpoint]")
			},
			want: "is not the endpoint of an account the identity is given a role on",
		},
		{
			name:  "AZURE_CLIENT_ID of another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AZURE_CLIENT_ID", "[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id'), '2023-01-31').clientId]")
			},
			want: `AZURE_CLIENT_ID is "clientId(/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/opstatus-int-eastus/providers/Microsoft.ManagedIdentity/userAssignedIdentities/other-id)"`,
		},
		{
			name:  "pickup's Cosmos DB connection as another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS__clientId", "[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id'), '2023-01-31').clientId]")
			},
			want: `COSMOS__clientId is "clientId(/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/opstatus-int-eastus/providers/Microsoft.ManagedIdentity/userAssignedIdentities/other-id)"`,
		},
		{
			name:  "pickup's Cosmos DB connection with another credential",
			check: "identity",
			edit:  func(t *testing.T, tmpl map[string]any) { setSetting(t, tmpl, "COSMOS__credential", "azurecli") },
			want:  `COSMOS__credential is "azurecli", want "managedidentity"`,
		},
		{
			name:  "pickup's Cosmos DB connection to another account than the role's",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS__accountEndpoint", "[reference(resourceId(parameters('cosmosResourceGroup'), 'Microsoft.DocumentDB/databaseAccounts', 'other'), '2024-11-15').documentEndpoint]")
			},
			want: `COSMOS__accountEndpoint "https://other.documents.azure.com:443/" is not the endpoint of an account the identity is given a role on`,
		},
		{
			name:  "a role given to another principal",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Blob"))["principalId"] = "[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id'), '2023-01-31').principalId]"
			},
			want: "not the app's identity",
		},
		{
			name:  "the deployment package read as another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				auth := functionAppConfig(t, tmpl, "deployment", "storage", "authentication")
				auth["userAssignedIdentityResourceId"] = "[resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id')]"
			},
			want: "deployment storage authenticates as",
		},
		{
			name:  "the deployment package read with a connection string",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				auth := functionAppConfig(t, tmpl, "deployment", "storage", "authentication")
				auth["type"] = "SystemAssignedIdentity"
			},
			want: "want UserAssignedIdentity",
		},
		{
			name:  "SCAN_SCHEDULE missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "SCAN_SCHEDULE") },
			want:  "scan/function.json reads %SCAN_SCHEDULE%",
		},
		{
			name:  "COSMOS_DATABASE missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS_DATABASE") },
			want:  "COSMOS_DATABASE: required setting is missing",
		},
		{
			name:  "AZURE_LOCATION a display name",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { setSetting(t, tmpl, "AZURE_LOCATION", "East US") },
			want:  `AZURE_LOCATION: "East US" is not an Azure region name`,
		},
		{
			name:  "AZURE_CLIENT_ID missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "AZURE_CLIENT_ID") },
			want:  "AZURE_CLIENT_ID is not set",
		},
		{
			name:  "the host's storage as a connection string setting",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "AzureWebJobsStorage", "[parameters('storageAccountName')]")
			},
			want: "setting AzureWebJobsStorage is a connection string",
		},
		{
			name:  "COSMOS_LEASES_CONTAINER missing",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				removeSetting(t, tmpl, "COSMOS_LEASES_CONTAINER")
				removeSetting(t, tmpl, "CLUSTER_SERVICE_BUDGET") // else the handler refuses to start first
			},
			want: "pickup/function.json reads %COSMOS_LEASES_CONTAINER%",
		},
		{
			name:  "COSMOS_LEASES_CONTAINER missing with a budget",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS_LEASES_CONTAINER") },
			want:  "CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER",
		},
		{
			name:  "pickup's Cosmos DB connection without its endpoint",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS__accountEndpoint") },
			want:  "connection COSMOS needs COSMOS__accountEndpoint",
		},
		{
			name:  "pickup's Cosmos DB connection as a connection string setting",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "COSMOS", "[parameters('cosmosAccountName')]")
			},
			want: "setting COSMOS is a connection string; use COSMOS__accountEndpoint",
		},
		{
			name:  "FUNCTIONS_WORKER_RUNTIME, which Flex replaces",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { addSetting(t, tmpl, "FUNCTIONS_WORKER_RUNTIME", "custom") },
			want:  "FUNCTIONS_WORKER_RUNTIME is not used on Flex Consumption",
		},
		{
			name:  "a queue name function.json does not use",
			check: "bindings",
			edit:  func(t *testing.T, tmpl map[string]any) { variables(tmpl)["queueName"] = "operation" },
			want:  "the bindings' queue and its poison queue",
		},
		{
			name:  "the host's storage in another account than the queue's",
			check: "bindings",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AzureWebJobsStorage__accountName", "[format('{0}x', parameters('storageAccountName'))]")
			},
			want: "is not a storage account of the template",
		},
		{
			name:  "a deployment container the template does not create",
			check: "bindings",
			edit: func(t *testing.T, tmpl map[string]any) {
				storage := functionAppConfig(t, tmpl, "deployment", "storage")
				storage["value"] = "[format('{0}{1}', reference(variables('storageId'), '2023-05-01').primaryEndpoints.blob, 'packages')]"
			},
			want: "deployment container packages is not created",
		},
		{
			name:  "shared keys on",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))["allowSharedKeyAccess"] = true
			},
			want: "allowSharedKeyAccess true",
		},
		{
			name:  "Application Insights with local auth",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Insights/components", ""))["DisableLocalAuth"] = false
			},
			want: "DisableLocalAuth false",
		},
		{
			name:  "a Cosmos DB key read with listKeys into an output",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				tmpl["outputs"].(map[string]any)["cosmos"] = map[string]any{
					"type":  "string",
					"value": "[listKeys(resourceId(parameters('cosmosResourceGroup'), 'Microsoft.DocumentDB/databaseAccounts', parameters('cosmosAccountName')), '2024-11-15').primaryMasterKey]",
				}
			},
			want: "a list function reads keys",
		},
		{
			name:  "a storage connection string",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "STORAGE", "[format('DefaultEndpointsProtocol=https;AccountName={0}', parameters('storageAccountName'))]")
			},
			want: "DefaultEndpointsProtocol",
		},
		{
			name:  "a setting that looks like a credential",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "CLUSTER_SERVICE_TOKEN", "[parameters('clusterServiceUrl')]")
			},
			want: "setting CLUSTER_SERVICE_TOKEN looks like a credential",
		},
		{
			name:  "basic-auth publishing left on",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/sites/basicPublishingCredentialsPolicies", "scm"))["allow"] = true
			},
			want: "basic-auth publishing credentials must be off",
		},
		{
			name:   "a setting of the static split left in",
			check:  "budget",
			values: budgetDefaults,
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "MAXIMUM_INSTANCE_COUNT", "[string(parameters('maximumInstanceCount'))]")
			},
			want: "MAXIMUM_INSTANCE_COUNT is set, but the handler no longer reads it",
		},
		{
			name:   "the ceiling lowered by the static split",
			check:  "budget",
			values: budgetDefaults,
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "CLUSTER_SERVICE_MAX_IN_FLIGHT", "[string(div(parameters('clusterServiceBudget'), mul(2, parameters('maximumInstanceCount'))))]")
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 3, not 64",
		},
		{
			name:   "the ceiling not by the instance's cores",
			check:  "budget",
			values: budgetDefaults,
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "CLUSTER_SERVICE_MAX_IN_FLIGHT", "[string(parameters('clusterServiceMaxInFlight'))]")
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 0, not 64",
		},
		{
			name:   "the budget without the ledger's container",
			check:  "budget",
			values: budgetDefaults,
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS_LEASES_CONTAINER", "")
			},
			want: "CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER",
		},
		{
			name:  "more always-ready instances than the instance limit",
			check: "always ready",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = "[createArray(createObject('name', 'function:poll', 'instanceCount', add(parameters('maximumInstanceCount'), 1)))]"
			},
			want: "alwaysReady entry function:poll has 41 instances, over maximumInstanceCount 40",
		},
		{
			name:   "an always-ready instance billed for pickup when the host does not run it",
			check:  "always ready",
			values: map[string]any{"pickupEnabled": false},
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = "[createArray(createObject('name', 'function:pickup', 'instanceCount', parameters('alwaysReadyPickup')))]"
			},
			want: "alwaysReady entry function:pickup bills 1 instances of a function the host does not run",
		},
		{
			name:   "an always-ready entry of 0 instances",
			check:  "always ready",
			values: map[string]any{"alwaysReadyPoll": 0},
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = "[createArray(createObject('name', 'function:poll', 'instanceCount', parameters('alwaysReadyPoll')))]"
			},
			want: "alwaysReady entry function:poll has 0 instances: leave it out",
		},
		{
			name:  "an always-ready entry named as a group Flex does not have",
			check: "always ready",
			edit: func(t *testing.T, tmpl map[string]any) {
				replaceIn(t, variables(tmpl), "alwaysReady", "'function:poll'", "'poll'")
			},
			want: "alwaysReady entry \"poll\" is not function:<name> of a function of the app",
		},
		{
			name:   "no instance limit",
			check:  "budget",
			values: budgetDefaults,
			edit: func(t *testing.T, tmpl map[string]any) {
				sc := functionAppConfig(t, tmpl, "scaleAndConcurrency")
				delete(sc, "maximumInstanceCount")
			},
			want: "maximumInstanceCount is not set",
		},
		{
			name:  "no principal ID for the resource provider's IaC",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(tmpl["outputs"].(map[string]any), "identityPrincipalId")
			},
			want: "output identityPrincipalId",
		},
		{
			name:   "the Cosmos DB role assigned though left to the resource provider",
			check:  "grants",
			values: map[string]any{"assignCosmosRole": false},
			edit:   func(t *testing.T, tmpl map[string]any) { delete(cosmosRoleAssignment(t, tmpl), "condition") },
			want:   "want exactly",
		},
		{
			name:   "the Key Vault role assigned though left to the resource provider",
			check:  "grants",
			values: withValues(clientCredentials, map[string]any{"assignKeyVaultRole": false}),
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Resources/deployments", "keyvault-role")["condition"] = "[variables('clusterServiceCredentials')]"
			},
			want: "want exactly",
		},
		{
			name:   "the CA bundle's Key Vault role assigned though left to the resource provider",
			check:  "grants",
			values: map[string]any{"assignKeyVaultRole": false},
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Resources/deployments", "cabundle-role")["condition"] = "[variables('clusterServiceCaBundle')]"
			},
			want: "want exactly",
		},
		{
			name:  "no role on the host's diagnostic events table",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				removeResource(t, tmpl, findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Table"))
			},
			want: "want exactly",
		},
		{
			name:  "tableServiceUri missing",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				removeSetting(t, tmpl, "AzureWebJobsStorage__tableServiceUri")
			},
			want: "AzureWebJobsStorage__tableServiceUri is not set",
		},
		{
			name:   "the client secret as a plain setting",
			check:  "secrets",
			values: clientCredentials,
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "CLUSTER_SERVICE_CLIENT_SECRET", "[parameters('clusterServiceSecretName')]")
			},
			want: "setting CLUSTER_SERVICE_CLIENT_SECRET looks like a credential and is not a Key Vault reference",
		},
		{
			name:   "Key Vault Secrets User on the whole vault",
			check:  "grants",
			values: clientCredentials,
			edit: func(t *testing.T, tmpl map[string]any) {
				keyVaultRoleAssignment(t, tmpl, "keyvault-role")["scope"] = "[format('Microsoft.KeyVault/vaults/{0}', parameters('vaultName'))]"
			},
			want: "CLUSTER_SERVICE_CLIENT_SECRET refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service, on which the identity is given no Key Vault Secrets User",
		},
		{
			name:  "Key Vault Secrets User on the CA bundle's whole vault",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				keyVaultRoleAssignment(t, tmpl, "cabundle-role")["scope"] = "[format('Microsoft.KeyVault/vaults/{0}', parameters('vaultName'))]"
			},
			want: "CLUSTER_SERVICE_CA_BUNDLE refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-clusters-service-ca, on which the identity is given no Key Vault Secrets User",
		},
		{
			name:  "Key Vault references resolved as another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "keyVaultReferenceIdentity")
			},
			want: "keyVaultReferenceIdentity is <nil>",
		},
		{
			name:  "an instance limit under the platform's floor by default",
			check: "instance floor",
			edit: func(t *testing.T, tmpl map[string]any) {
				parameters(tmpl)["maximumInstanceCount"].(map[string]any)["defaultValue"] = 4
			},
			want: "maximumInstanceCount defaults to 4, under 40",
		},
		{
			name:  "an appName too long for the plan's name",
			check: "names",
			edit: func(t *testing.T, tmpl map[string]any) {
				parameters(tmpl)["appName"].(map[string]any)["maxLength"] = 56
			},
			want: "an appName of 56 characters names Microsoft.Web/serverfarms",
		},
		{
			name:  "a runtime other than the custom handler",
			check: "flex",
			edit: func(t *testing.T, tmpl map[string]any) {
				rt := functionAppConfig(t, tmpl, "runtime")
				rt["name"] = "node"
			},
			want: "want custom 1.0",
		},
		{
			name:  "the Go runtime's threads not held to the instance's cores",
			check: "flex",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "GOMAXPROCS", "2")
			},
			want: `GOMAXPROCS is "2", want 1: the cores of a 512 MB instance`,
		},
	})
}
