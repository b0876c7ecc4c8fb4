package faultproxy

import (
	"encoding/json"
	"slices"
	"time"
)

// maxLoggedBody bounds the request and response bodies kept in the write log.
const maxLoggedBody = 64 << 10

// Write is one item write that the upstream answered with a 2xx status.
type Write struct {
	// Seq orders the writes of one proxy by when it forwarded them. Every
	// forwarded request takes a number, so the writes' numbers have gaps.
	Seq int64
	// Start is when the proxy forwarded the write and End when the
	// upstream's answer arrived: the upstream applied the write at some
	// instant in [Start, End].
	Start, End time.Time
	// Kind is create, upsert, replace, delete, patch or batch.
	Kind string
	// Database, Container, PartitionKey and ItemID are as in Request.
	Database, Container, PartitionKey, ItemID string
	// Status is the upstream's HTTP status.
	Status int
	// ETag is the upstream's etag header (the item's new _etag); IfMatch is
	// the request's If-Match, the etag the writer expected.
	ETag, IfMatch string
	// Body is the request body of a create, upsert, replace, patch or
	// batch when it is valid JSON of at most 64 KiB; BodyTruncated is set
	// when it was larger and therefore not kept.
	Body          json.RawMessage `json:",omitempty"`
	BodyTruncated bool            `json:",omitempty"`
	// ResponseBody is the upstream's answer under the same rules (empty
	// for a delete or a "Prefer: return=minimal" write).
	ResponseBody      json.RawMessage `json:",omitempty"`
	ResponseTruncated bool            `json:",omitempty"`
	// UserAgent is the client's User-Agent (azcosmos puts
	// ClientOptions.Telemetry.ApplicationID first); Owner is the
	// x-opstatus-owner request header, if any; Source is the proxy's
	// Options.Name, to tell proxies apart in merged logs.
	UserAgent, Owner, Source string
	// Delivered is set when the upstream's answer reached the client. It is
	// false after a drop-after-forward fault, or when the client went away
	// while the write was in flight: the write happened without the client
	// knowing.
	Delivered bool
}

// logWrite appends w to the write log.
func (p *Proxy) logWrite(w Write) {
	p.writeMu.Lock()
	p.writes = append(p.writes, w)
	p.writeMu.Unlock()
}

// markUndelivered clears Delivered on the write numbered seq.
func (p *Proxy) markUndelivered(seq int64) {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	for i := len(p.writes) - 1; i >= 0; i-- {
		if p.writes[i].Seq == seq {
			p.writes[i].Delivered = false
			return
		}
	}
}

// Writes returns a copy of the write log in Seq order. Only writes the
// upstream answered with 2xx are in it; a write whose answer never reached
// the proxy (the upstream failed, or the proxy closed first) is not.
func (p *Proxy) Writes() []Write {
	p.writeMu.Lock()
	out := slices.Clone(p.writes)
	p.writeMu.Unlock()
	slices.SortFunc(out, func(a, b Write) int { return int(a.Seq - b.Seq) })
	return out
}

// keepJSON returns b as a JSON value if it is valid JSON of at most
// maxLoggedBody bytes, and whether it was too large to keep.
func keepJSON(b []byte) (json.RawMessage, bool) {
	if len(b) > maxLoggedBody {
		return nil, true
	}
	if len(b) == 0 || !json.Valid(b) {
		return nil, false
	}
	return json.RawMessage(slices.Clone(b)), false
}
