// Package deploy holds opstatus's infrastructure as code: azuredeploy.json,
// the ARM template of the Function App on Flex Consumption with everything
// it connects to by identity, integrated with the resource provider's
// virtual network, its storage and inbound side private by default, and
// example.parameters.json for one environment;
// docs/deploy.md is the guide to deploying it. The package has no code of
// its own: its tests check the template offline, against the ARM schemas of
// each resource's provider and API version and against what a schema
// cannot see (the built-in roles, the handler's settings in every
// combination of the parameters, the bindings' names, secrets, identities,
// the network path and private endpoints, the Cluster Service budget, the
// always-ready instances and zone redundancy, and what the template itself
// refuses). Two packages under internal/ are the tests' machinery:
// armeval resolves the template as ARM would for one deployment, armschema
// checks it against the schemas; each check file holds its checks and the
// broken copies of the template they must refuse. mesh/ is the Helm chart
// ARO-HCP applies in its service cluster so that opstatus reaches Cluster
// Service through the mesh (mesh/README.md is its owners' guide); its
// tests decode it into the Kubernetes and Istio API types and hold its
// policies to the requests opstatus's client sends.
package deploy
