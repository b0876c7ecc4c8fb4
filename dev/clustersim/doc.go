// Package clustersim simulates the status endpoints of Cluster Service (the
// OCM API that provisions ARO-HCP clusters) for local runs, end-to-end tests
// and benchmarks. It never ships.
//
// A [Sim] serves
//
//	GET /api/clusters_mgmt/v1/clusters/{id}/status
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/status
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}/status
//	GET /api/clusters_mgmt/v1/clusters/{id}/inflight_checks
//	GET /api/aro_hcp/v1alpha1/clusters/{id}/inflight_checks
//
// with the JSON bodies Cluster Service sends, and an admin API under /admin
// (loopback clients only) that creates, updates and deletes simulated
// resources, sets states directly, injects faults and reports statistics.
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
