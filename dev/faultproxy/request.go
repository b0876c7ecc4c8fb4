package faultproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Request kinds, from the method, the path and the Cosmos DB headers.
const (
	KindRead    = "read"    // GET of an item, or of a container's item feed
	KindQuery   = "query"   // POST .../docs with x-ms-documentdb-isquery
	KindCreate  = "create"  // POST .../docs
	KindUpsert  = "upsert"  // POST .../docs with x-ms-documentdb-is-upsert
	KindReplace = "replace" // PUT .../docs/{id}
	KindDelete  = "delete"  // DELETE .../docs/{id}
	KindPatch   = "patch"   // PATCH .../docs/{id}
	KindBatch   = "batch"   // POST .../docs with x-ms-cosmos-is-batch-request
	KindMeta    = "meta"    // anything else: account, databases, containers, partition key ranges
)

// Cosmos DB request headers the proxy reads.
const (
	headerPartitionKey = "x-ms-documentdb-partitionkey"
	headerIsQuery      = "x-ms-documentdb-isquery"
	headerIsUpsert     = "x-ms-documentdb-is-upsert"
	headerIsBatch      = "x-ms-cosmos-is-batch-request"
	// HeaderOwner is an optional request header naming the writer (a lock
	// owner); it is recorded in Write.Owner.
	HeaderOwner = "x-opstatus-owner"
)

// Request is a client request as the proxy classifies it. Match and Delay
// functions receive it; they must not modify Header.
type Request struct {
	// Method and Path are the HTTP method and the unescaped URL path.
	Method, Path string
	// Database, Container and ItemID come from the path
	// /dbs/{db}/colls/{coll}/docs/{id}; for a create or an upsert ItemID
	// comes from the body's "id".
	Database, Container, ItemID string
	// PartitionKey is the x-ms-documentdb-partitionkey header's value: the
	// string in a one-string JSON array such as ["sub1"], otherwise the
	// header as sent; empty when absent.
	PartitionKey string
	// IsQuery is set for a query (Kind "query").
	IsQuery bool
	// IsWrite is set for item writes: create, upsert, replace, delete,
	// patch and batch. Writes to databases or containers are "meta".
	IsWrite bool
	// Kind is one of the Kind constants.
	Kind string
	// Header is the request's header.
	Header http.Header
}

// String describes r for logs.
func (r Request) String() string {
	s := fmt.Sprintf("%s %s", r.Kind, r.Path)
	if r.PartitionKey != "" {
		s += " pk=" + r.PartitionKey
	}
	return s
}

// parseRequest classifies r, whose body has been read into body.
func parseRequest(r *http.Request, body []byte) Request {
	req := Request{
		Method:       r.Method,
		Path:         r.URL.Path,
		PartitionKey: parsePartitionKey(r.Header.Get(headerPartitionKey)),
		Kind:         KindMeta,
		Header:       r.Header,
	}
	segs := pathSegments(r.URL)
	if len(segs) >= 2 && segs[0] == "dbs" {
		req.Database = segs[1]
	}
	if len(segs) >= 4 && segs[2] == "colls" {
		req.Container = segs[3]
	}
	if len(segs) < 5 || len(segs) > 6 || segs[4] != "docs" {
		return req
	}
	if len(segs) == 5 {
		switch r.Method {
		case http.MethodGet:
			req.Kind = KindRead
		case http.MethodPost:
			switch {
			case isTrue(r.Header.Get(headerIsQuery)) || strings.HasPrefix(r.Header.Get("Content-Type"), "application/query+json"):
				req.Kind = KindQuery
			case isTrue(r.Header.Get(headerIsBatch)):
				req.Kind = KindBatch
			case isTrue(r.Header.Get(headerIsUpsert)):
				req.Kind = KindUpsert
			default:
				req.Kind = KindCreate
			}
		}
	} else {
		req.ItemID = segs[5]
		switch r.Method {
		case http.MethodGet:
			req.Kind = KindRead
		case http.MethodPut:
			req.Kind = KindReplace
		case http.MethodDelete:
			req.Kind = KindDelete
		case http.MethodPatch:
			req.Kind = KindPatch
		}
	}
	req.IsQuery = req.Kind == KindQuery
	switch req.Kind {
	case KindCreate, KindUpsert, KindReplace, KindDelete, KindPatch, KindBatch:
		req.IsWrite = true
	}
	if req.Kind == KindCreate || req.Kind == KindUpsert {
		var doc struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(body, &doc) == nil {
			req.ItemID = doc.ID
		}
	}
	return req
}

// pathSegments splits u's path into unescaped segments, so that an escaped
// "/" inside an id stays in its segment.
func pathSegments(u *url.URL) []string {
	trimmed := strings.Trim(u.EscapedPath(), "/")
	if trimmed == "" {
		return nil
	}
	segs := strings.Split(trimmed, "/")
	for i, s := range segs {
		if v, err := url.PathUnescape(s); err == nil {
			segs[i] = v
		}
	}
	return segs
}

// parsePartitionKey returns the string of a one-string JSON array, or the
// header unchanged (hierarchical keys, numbers, null, the empty array).
func parsePartitionKey(h string) string {
	var values []any
	if err := json.Unmarshal([]byte(h), &values); err == nil && len(values) == 1 {
		if s, ok := values[0].(string); ok {
			return s
		}
	}
	return h
}

func isTrue(h string) bool { return strings.EqualFold(strings.TrimSpace(h), "true") }
