// Package docs holds the project's guides (operations, deploy, design,
// development) and the test that keeps them honest: every setting the
// handler reads and every metric it registers is documented, every alert
// names only metrics that exist, and every relative link resolves.
package docs
