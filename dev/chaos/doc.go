// Package chaos holds the reliability tests of opstatus (RELIABILITY.md): the
// whole local stack (Azurite, the Cosmos test server behind a fault-injecting
// proxy, the Cluster Service simulator with faults, the host emulator driving
// the built handler as Flex Consumption runs it) under injected failures,
// handler kills, poll instances added and removed as the queue grows and
// shrinks, crashes of the scan instance and a frontend that takes
// subscription locks at random, some for slow requests; a Cluster Service
// outage; and the subscription lock's behaviour when its holder dies or
// cannot renew it.
//
// The tests need the handler binary (make build). `make test` runs them with
// a bounded scenario; OPSTATUS_SOAK=1 (or a duration such as
// OPSTATUS_SOAK=30m, or the test flag -soak) runs a longer soak.
// OPSTATUS_CHAOS_SEED fixes the random seed, which every run prints. It never
// ships.
package chaos
