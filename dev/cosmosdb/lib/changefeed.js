"use strict";

// The change feed, as Cosmos DB serves it in its latest version
// ("incremental") mode. The stock server answers a change feed read without
// If-None-Match with the items from the first on, and one with it with 304,
// under the fixed etag 1: a reader sees its first page and then nothing.
//
// What Cosmos DB does, and this module does too:
//  - every write of an item (create, replace, upsert, patch) gives it the
//    next logical sequence number (LSN) of its partition key range; the
//    operations of one transactional batch share one LSN. This server has
//    one range, "0", so one sequence per container;
//  - GET .../docs with "A-IM: Incremental feed" answers the latest version of
//    each item written after the reader's point, once, in LSN order, with its
//    _lsn; deletes and expiries do not appear;
//  - the point is If-None-Match: absent = from the beginning, "*" = from now,
//    else the etag of an earlier answer (a quoted LSN); without it,
//    If-Modified-Since starts at the first change after that time;
//  - x-ms-max-item-count bounds a page (-1: no bound; without it, 100, this
//    server's choice), but a page never splits the items of one LSN;
//  - the answer's etag is the LSN of its last item, or 304 Not Modified with
//    the LSN the reader is now at when nothing changed after its point.
//
// The SDKs read the partition key ranges as a feed too (GET .../pkranges
// with A-IM), to route: the stock answer, every range and then 304, is
// right for ranges that never change, once their ids are strings
// (handlers.js).

const { stockModule } = require("./stock");
const handlers = require("./handlers");

const Items = stockModule("lib/account/items").default;
const Documents = stockModule("lib/account/documents").default;
const documentOperations = stockModule("lib/handler/_document-operations");
const trueHeader = stockModule("lib/true-header").default;

const INCREMENTAL_FEED = "incremental feed";
const DEFAULT_PAGE_SIZE = 100;
// The one partition key range every container of this server has.
const RANGE_ID = "0";
// Compact a feed's log once it holds this many superseded entries and they
// outnumber the live ones.
const COMPACT_AFTER = 1024;

// ---------------------------------------------------------------------------
// Sequence numbers

// The change feed of one item store (a container's documents), kept beside
// the stock store so that it moves with it when the container is replaced.
class Feed {
  constructor() {
    this.lsn = 0; // the last LSN given
    this.lsnOf = new Map(); // _rid of a live item -> LSN of its last write
    // One entry per write, in LSN order: { lsn, rid, time }. An entry whose
    // item was written again or deleted since is skipped when read.
    this.log = [];
    this.superseded = 0;
  }

  written(rid, lsn) {
    const rewritten = this.lsnOf.has(rid);
    this.lsnOf.set(rid, lsn);
    this.log.push({ lsn, rid, time: Date.now() });
    if (rewritten) this.supersede();
  }

  deleted(rid) {
    if (this.lsnOf.delete(rid)) this.supersede();
  }

  // Counts one more superseded entry, and drops them all once they are most
  // of the log, so that the log stays as long as the container.
  supersede() {
    this.superseded += 1;
    if (this.superseded > COMPACT_AFTER && this.superseded * 2 > this.log.length) {
      this.log = this.log.filter(entry => this.lsnOf.get(entry.rid) === entry.lsn);
      this.superseded = 0;
    }
  }

  // The index of the log's first entry after lsn.
  indexAfter(lsn) {
    let lo = 0;
    let hi = this.log.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.log[mid].lsn <= lsn) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // The LSN just before the first change made after time (ms since the
  // epoch), from which a reader reads that change on.
  lsnBefore(time) {
    let lo = 0;
    let hi = this.log.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.log[mid].time <= time) lo = mid + 1;
      else hi = mid;
    }
    return lo < this.log.length ? this.log[lo].lsn - 1 : this.lsn;
  }
}

const feeds = new WeakMap(); // Documents store -> Feed

function feedOf(store) {
  let feed = feeds.get(store);
  if (!feed) {
    feed = new Feed();
    feeds.set(store, feed);
  }
  return feed;
}

// The transactional batch whose operation is running, if any: its writes
// share one LSN. The stock batch handler runs its operations one after the
// other without yielding, so only one can be running.
let runningBatch = null;
// Operation (an element of a batch's body) -> its batch, { lsn }.
const batchOf = new WeakMap();

// Every item write goes through _set (create, and replace after removing
// the old version) and every removal through delete, as the partition index
// in handlers.js relies on too.
function sequenceWrites() {
  const set = Items.prototype._set;
  Items.prototype._set = function sequenced(data) {
    const item = set.call(this, data);
    if (this instanceof Documents) {
      const feed = feedOf(this);
      let lsn = runningBatch && runningBatch.lsn;
      if (!lsn) {
        feed.lsn += 1;
        lsn = feed.lsn;
        if (runningBatch) runningBatch.lsn = lsn;
      }
      feed.written(data._rid, lsn);
    }
    return item;
  };
  const del = Items.prototype.delete;
  Items.prototype.delete = function unsequenced(idOrRid, partition) {
    const data = this instanceof Documents && this._item("/id", idOrRid, partition).read();
    del.call(this, idOrRid, partition);
    if (data) feedOf(this).deleted(data._rid);
  };
}

// Marks the operations of each atomic batch, so that their writes share an
// LSN, as a transaction's do in Cosmos DB.
function sequenceBatches() {
  ["createOperation", "replaceOperation", "upsertOperation", "deleteOperation"].forEach(
    name => {
      const operation = documentOperations[name];
      documentOperations[name] = (collection, input) => {
        runningBatch = (input && batchOf.get(input)) || null;
        try {
          return operation(collection, input);
        } finally {
          runningBatch = null;
        }
      };
    }
  );
}

function inOneTransaction(stockHandler) {
  return async (account, req, res, params) => {
    // The reader is memoized: the stock handler gets these very objects.
    const body = await handlers.readJSON(req);
    if (Array.isArray(body) && trueHeader(req, "x-ms-cosmos-batch-atomic")) {
      const batch = { lsn: null };
      body.forEach(op => {
        if (op && typeof op === "object") batchOf.set(op, batch);
      });
    }
    return stockHandler(account, req, res, params);
  };
}

// ---------------------------------------------------------------------------
// Reading

const quoteLsn = lsn => `"${lsn}"`;

// The LSN after which the request reads.
function startOf(req, feed) {
  const ifNoneMatch = req.headers["if-none-match"];
  if (ifNoneMatch !== undefined && ifNoneMatch !== "") {
    if (ifNoneMatch.trim() === "*") return feed.lsn;
    const match = /^\s*(?:W\/)?"?(\d+)"?\s*$/.exec(ifNoneMatch);
    if (!match) {
      throw handlers.badRequest(`Invalid If-None-Match for the change feed: ${ifNoneMatch}`);
    }
    return Number(match[1]);
  }
  const since = req.headers["if-modified-since"];
  if (since !== undefined && since !== "") {
    const time = Date.parse(since);
    if (Number.isNaN(time)) {
      throw handlers.badRequest(`Invalid If-Modified-Since: ${since}`);
    }
    return feed.lsnBefore(time);
  }
  return 0;
}

function pageSizeOf(req) {
  const raw = req.headers["x-ms-max-item-count"];
  if (raw === undefined || raw === "") return DEFAULT_PAGE_SIZE;
  const size = Number(raw);
  if (size === -1) return Infinity;
  if (!Number.isInteger(size) || size < 1) {
    throw handlers.badRequest(`Invalid x-ms-max-item-count: ${raw}`);
  }
  return size;
}

// The A-IM header is ours to answer: on a request that carries it, the stock
// request handler turns a 200 into 304 when If-None-Match is set, and sets
// etag 1.
function takeChangeFeedHeader(req) {
  const value = String(req.headers["a-im"]).trim().toLowerCase();
  delete req.headers["a-im"];
  if (value !== INCREMENTAL_FEED) {
    throw handlers.badRequest(
      `A-IM "${value}" is not served: only the latest version ("Incremental feed") change feed is.`
    );
  }
}

// A request for a range other than "0" names a range this server never had;
// Cosmos DB answers a range it no longer has with 410 and sub-status 1002
// (PartitionKeyRangeGone), after which the SDKs refresh their routing map.
function checkRange(req) {
  const range = req.headers["x-ms-documentdb-partitionkeyrangeid"];
  if (range !== undefined && range !== RANGE_ID) {
    throw new handlers.RequestError(
      410,
      "Gone",
      `The partition key range ${range} is gone.`,
      1002
    );
  }
}

function notModified(res, lsn) {
  res.statusCode = 304;
  res.setHeader("etag", quoteLsn(lsn));
  return undefined;
}

// One page of the container's change feed after start: the latest version
// of each item, with its _lsn, whole LSNs only.
function pageOf(container, feed, start, size, partition) {
  const { documents } = container;
  const items = [];
  let last = null;
  for (let i = feed.indexAfter(start); i < feed.log.length; i += 1) {
    const { lsn, rid } = feed.log[i];
    if (items.length >= size && lsn !== last) break;
    if (feed.lsnOf.get(rid) === lsn) {
      const doc = documents._data.get(rid).read();
      if (!partition || documents._getPartition(doc) === partition.value) {
        items.push({ ...doc, _lsn: lsn });
        last = lsn;
      }
    }
  }
  return { items, last };
}

function withChangeFeed(stockHandler) {
  return handlers.handler((account, req, res, params) => {
    if (req.headers["a-im"] === undefined) return stockHandler(account, req, res, params);
    takeChangeFeedHeader(req);
    const container = handlers.containerOf(account, params);
    checkRange(req);
    const feed = feedOf(container.documents);
    const start = startOf(req, feed);
    const size = pageSizeOf(req);
    const partition = handlers.headerPartition(req);
    const { items, last } = pageOf(container, feed, start, size, partition);
    if (items.length === 0) return notModified(res, Math.max(start, feed.lsn));
    res.setHeader("etag", quoteLsn(last));
    res.setHeader("x-ms-item-count", String(items.length));
    return { _rid: container.props._rid, Documents: items, _count: items.length };
  });
}

let installed = false;

/**
 * Installs the change feed: call it after handlers.install() and before
 * loading the stock server (lib/index), which builds its routes from the
 * handler modules.
 */
function install() {
  if (installed) return;
  installed = true;
  sequenceWrites();
  sequenceBatches();
  const wrap = (name, make) => {
    const mod = stockModule(`lib/handler/${name}`);
    mod.default = make(mod.default);
  };
  wrap("read-documents", withChangeFeed);
  wrap("batch-documents", inOneTransaction);
}

module.exports = { install };
