// Package clustersim simulates the endpoints of Cluster Service (the OCM API
// that provisions ARO-HCP clusters) that opstatus reads, for local runs,
// end-to-end tests and benchmarks. It never ships.
//
// A [Sim] serves
//
//	GET /api/clusters_mgmt/v1/clusters/{id}
//	GET /api/aro_hcp/v1alpha1/clusters/{id}
//	GET /api/clusters_mgmt/v1/clusters/{id}/status
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/status
//	GET /api/clusters_mgmt/v1/clusters/{id}/node_pools/{np}
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}/status
//	GET /api/clusters_mgmt/v1/clusters/{id}/inflight_checks
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/inflight_checks
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/external_auth_config/external_auths/{ea}
//	GET /api/clusters_mgmt/v1/clusters/{id}/break_glass_credentials/{bgc}
//	GET /api/clusters_mgmt/v1/clusters/{id}/break_glass_credentials?page=&size=
//
// with the JSON bodies Cluster Service sends (a 404 is an OCM error with
// "kind":"Error", a path no API serves included). A node pool is served
// under each API its cluster is, as each API served it: clusters_mgmt has
// the object alone, whose status has current_replicas and a message but no
// state (as in 2024-10), and no /status; aro_hcp has the object and
// /status with the state. There is also an admin API under /admin
// (loopback clients only) that creates, updates and deletes simulated
// resources, revokes credentials, sets states directly, injects faults and
// reports statistics:
//
//	PUT|GET|DELETE /admin/clusters/{id}                        POST …/update
//	PUT|GET|DELETE /admin/clusters/{id}/node_pools/{np}        POST …/update
//	PUT|GET|DELETE /admin/clusters/{id}/external_auths/{ea}    POST …/update
//	PUT|GET        /admin/clusters/{id}/break_glass_credentials/{bgc}  POST …/revoke
//	POST           /admin/clusters/{id}/break_glass_credentials/revoke (every credential)
//	GET /admin/clusters, POST /admin/ready-all, POST /admin/state,
//	GET|DELETE /admin/stats, GET|PUT /admin/faults
//
// A PUT body is a [Script] (fields it leaves out come from
// Options.Defaults); a DELETE, update or revoke body may name its duration
// ({"uninstalling":"2s"}, {"updating":"2s"}, {"revoking":"2s"}).
//
// A cluster that failed its inflight checks is one whose script fails with
// ErrorCode "OCM4001" and lists its checks in InflightChecks: PUT
// /admin/clusters/{id} with {"fail":true,"errorCode":"OCM4001",
// "inflightChecks":[{"name":"egress","state":"failed","details":{"error":"…"}}]}
// and zero durations makes it so at once. PUT /admin/faults with
// {"inflightChecksStatus":500} makes every inflight checks call fail.
//
// States are not driven by timers: each resource keeps a lifecycle [Script],
// the phase it is in and the time that phase started, and its state is
// computed from those and the [Clock] on every request. Tests use a
// [ManualClock] to move time forward without sleeping.
package clustersim
