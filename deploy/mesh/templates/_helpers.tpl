{{- /*
The requests opstatus sends to Cluster Service, all GET: for each internalId
form internal/clusterservice accepts, the object, its status, a cluster's
inflight checks and its break-glass credential list (a clusters_mgmt node
pool: the object alone; that API has no node pool status). {*} is one path segment
(an Istio path template); the query (the credential list's page and size) is
not part of the path Istio matches. go test ./deploy derives this list from
the client's own requests and fails when the two differ.
*/ -}}
{{- define "opstatus.operation" }}
        methods: ["GET"]
        paths:
        - "/api/clusters_mgmt/v1/clusters/{*}"
        - "/api/clusters_mgmt/v1/clusters/{*}/status"
        - "/api/clusters_mgmt/v1/clusters/{*}/inflight_checks"
        - "/api/clusters_mgmt/v1/clusters/{*}/node_pools/{*}"
        - "/api/clusters_mgmt/v1/clusters/{*}/break_glass_credentials"
        - "/api/clusters_mgmt/v1/clusters/{*}/break_glass_credentials/{*}"
        - "/api/aro_hcp/v1alpha1/clusters/{*}"
        - "/api/aro_hcp/v1alpha1/clusters/{*}/status"
        - "/api/aro_hcp/v1alpha1/clusters/{*}/inflight_checks"
        - "/api/aro_hcp/v1alpha1/clusters/{*}/node_pools/{*}/status"
        - "/api/aro_hcp/v1alpha1/clusters/{*}/external_auth_config/external_auths/{*}"
{{- end }}
