// Package deploy holds opstatus's infrastructure as code: azuredeploy.json,
// the ARM template of the Function App on Flex Consumption with everything
// it connects to by identity, and example.parameters.json for one
// environment. The package has no code of its own: its tests check the
// template offline, against the ARM schemas of each resource's provider and
// API version and against what a schema cannot see (the built-in roles, the
// handler's settings, the bindings' names, secrets, identities and the
// Cluster Service budget).
package deploy
