package main

import (
	"net/http"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// requests counts the requests one side of the comparison made in a window.
type requests struct {
	// CS counts Cluster Service status calls.
	CS int64
	// Reads are point reads of Operations or Resources items; Queries are
	// query pages; Writes are creates, upserts, replaces, deletes, patches
	// and batches of Operations or Resources items.
	Reads, Queries, Writes int64
	// LockOps are requests to the Locks container (acquire, renew,
	// release) and LockConflicts the acquires answered 409.
	LockOps, LockConflicts int64
	// Meta counts account, database and container reads.
	Meta int64
	// Failed counts Cosmos requests answered neither 2xx nor 404, 409 or
	// 412 (throttling, 5xx, dropped connections).
	Failed int64
}

// Cosmos is every Cosmos request but the metadata reads.
func (r requests) Cosmos() int64 { return r.Reads + r.Queries + r.Writes + r.LockOps }

// sub returns r - o.
func (r requests) sub(o requests) requests {
	return requests{
		CS: r.CS - o.CS, Reads: r.Reads - o.Reads, Queries: r.Queries - o.Queries, Writes: r.Writes - o.Writes,
		LockOps: r.LockOps - o.LockOps, LockConflicts: r.LockConflicts - o.LockConflicts,
		Meta: r.Meta - o.Meta, Failed: r.Failed - o.Failed,
	}
}

// add returns r + o.
func (r requests) add(o requests) requests {
	return requests{
		CS: r.CS + o.CS, Reads: r.Reads + o.Reads, Queries: r.Queries + o.Queries, Writes: r.Writes + o.Writes,
		LockOps: r.LockOps + o.LockOps, LockConflicts: r.LockConflicts + o.LockConflicts,
		Meta: r.Meta + o.Meta, Failed: r.Failed + o.Failed,
	}
}

// classify adds up the Cosmos server's request counts by what the
// comparison reports.
func classify(counts []testenv.RequestCount, csCalls int64) requests {
	r := requests{CS: csCalls}
	for _, k := range counts {
		if isTrigger(k) {
			continue
		}
		n := k.Count
		switch k.Status {
		case http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed:
		default:
			if k.Status < 200 || k.Status > 299 {
				r.Failed += n
			}
		}
		switch {
		case k.Kind == "meta":
			r.Meta += n
		case k.Container == "Locks":
			r.LockOps += n
			if k.Kind == "create" && k.Status == http.StatusConflict {
				r.LockConflicts += n
			}
		case k.Kind == "read":
			r.Reads += n
		case k.Kind == "query":
			r.Queries += n
		default:
			r.Writes += n
		}
	}
	return r
}

// isTrigger reports whether k is the host's Cosmos DB trigger's traffic,
// not the handler's: reads of the change feed and requests to the lease
// container, which the pickup scenario counts (triggerCounts).
func isTrigger(k testenv.RequestCount) bool {
	return k.Kind == "changefeed" || k.Container == frontend.LeasesContainer
}

// perOp is requests divided by a number of operations (or polls).
type perOp struct {
	CS, Reads, Queries, Writes, LockOps, Cosmos float64
}

func (r requests) per(n int64) perOp {
	if n <= 0 {
		return perOp{}
	}
	d := float64(n)
	return perOp{
		CS: float64(r.CS) / d, Reads: float64(r.Reads) / d, Queries: float64(r.Queries) / d,
		Writes: float64(r.Writes) / d, LockOps: float64(r.LockOps) / d, Cosmos: float64(r.Cosmos()) / d,
	}
}
