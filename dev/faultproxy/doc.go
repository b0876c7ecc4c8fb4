// Package faultproxy is a fault-injecting reverse proxy for the Cosmos DB
// REST protocol, for chaos and reliability tests. It never ships.
//
// A [Proxy] listens on 127.0.0.1 (TLS with an in-memory self-signed
// certificate, or plain HTTP) and forwards every request to one upstream
// Cosmos DB endpoint, such as the project's test server started by
// internal/testenv, skipping verification of the upstream's certificate. Client
// and upstream connections are kept alive. The account read (GET /) is
// rewritten so that the account's locations name the proxy: a client that
// follows them keeps talking to the proxy.
//
// Each request is classified into a [Request] (database, container, item id,
// partition key, kind) from its path and headers. [Faults] then decide, at
// random among the requests that [Faults.Match] selects, whether the request
// is throttled (429 with x-ms-retry-after-ms), answered 503, held until it
// times out (never forwarded), or has its connection dropped, either before
// forwarding or after the upstream answered (the write happened, but the
// client never learns it). [Proxy.Delay] delays chosen requests.
//
// Every item write (create, upsert, replace, delete, patch, batch) that the
// upstream answered with a 2xx status is recorded in a write log
// ([Proxy.Writes]) with the instants the proxy forwarded it and received the
// answer: the upstream applied the write somewhere between the two.
// [LockViolations] rebuilds subscription lock leases from such a log and
// finds writes made while another owner held the lock.
package faultproxy
