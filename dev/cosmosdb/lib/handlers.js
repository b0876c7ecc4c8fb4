"use strict";

// Replacement request handlers for the stock @vercel/cosmosdb-server.
//
// The stock router (lib/routes.js) reads each handler module's `default`
// export once, when it is loaded. install() swaps those exports before the
// router is loaded, so the stock server (its HTTP plumbing, storage and query
// engine) runs our handlers. Documents keep living in the stock storage
// (collection.documents, an Items map keyed by _rid).
//
// What the replacements fix, in Cosmos DB terms:
//  - point operations on a missing item answer 404, not 500; any request to a
//    missing container or database answers 404 with sub-status 1003 (owner
//    resource not found), so that a client can tell the two apart;
//  - a query with a partition key header only sees that partition, and needs
//    no partition key filter in its text;
//  - time to live: the container's defaultTtl and the item's ttl expire items,
//    measured from their last write's whole-second _ts;
//  - every write gets a new quoted _etag; If-Match gives 412; "Prefer:
//    return=minimal" gives an empty body, as in Cosmos DB;
//  - patch conditions keep their case (stock lower-cases the whole clause);
//  - partition key range ids are strings;
//  - the account's locations carry the scheme and port actually served;
//  - replacing a container keeps its items;
//  - writes are refused as Cosmos DB refuses them: a body that is not a JSON
//    object, over 2 MB (413) or not JSON at all, an id that is missing, too
//    long or holds '/', '\\', '?' or '#', a partition key value over 2 KB or
//    other than the header's, an invalid ttl (400).

const { randomUUID } = require("crypto");
const { stockModule, dependency } = require("./stock");

const rawBody = dependency("raw-body");

const readItems = stockModule("lib/handler/_read-items").default;
const jsonBody = stockModule("lib/json");
const trueHeader = stockModule("lib/true-header").default;
const { patchOperation } = stockModule("lib/handler/_patch-operations");
const Items = stockModule("lib/account/items").default;

// Looked up on each call: install() replaces it with a memoizing reader.
const readJSON = req => jsonBody.default(req);

const PARTITION_KEY_HEADER = "x-ms-documentdb-partitionkey";

// ---------------------------------------------------------------------------
// Responses

class RequestError extends Error {
  constructor(status, code, message, subStatus) {
    super(message);
    this.status = status;
    this.code = code;
    this.subStatus = subStatus; // x-ms-substatus, when there is one
  }
}

const badRequest = message => new RequestError(400, "BadRequest", message);
const notFound = () =>
  new RequestError(
    404,
    "NotFound",
    "Entity with the specified id does not exist in the system."
  );
// Cosmos DB's answer to a request whose container (or its database) does not
// exist: a missing item's 404 carries no sub-status.
const ownerNotFound = () =>
  new RequestError(404, "NotFound", "Owner resource does not exist", 1003);
const conflict = () =>
  new RequestError(
    409,
    "Conflict",
    "Entity with the specified id already exists in the system."
  );
const preconditionFailed = () =>
  new RequestError(
    412,
    "PreconditionFailed",
    "Operation cannot be performed because one of the specified precondition is not met."
  );

// Wraps a handler so that a thrown RequestError becomes its response.
function handler(fn) {
  return async (account, req, res, params) => {
    try {
      return await fn(account, req, res, params);
    } catch (err) {
      if (!(err instanceof RequestError)) throw err;
      res.statusCode = err.status;
      if (err.subStatus !== undefined) {
        res.setHeader("x-ms-substatus", String(err.subStatus));
      }
      return { code: err.code, message: err.message };
    }
  };
}

// The response of a successful write: the etag header always, the item
// unless the client asked for a minimal response.
function written(req, res, status, doc) {
  res.statusCode = status;
  res.setHeader("etag", doc._etag);
  const prefer = String(req.headers.prefer || "").toLowerCase();
  return prefer.includes("return=minimal") ? undefined : doc;
}

// ---------------------------------------------------------------------------
// Writes: etags and write times

// Stock create/replace store and return the same object; give it a quoted
// etag, as Cosmos DB does. Every resource
// (database, container, item) and every item write (upsert, patch, batch)
// goes through these two.
function stampWrites() {
  ["create", "replace"].forEach(name => {
    const original = Items.prototype[name];
    Items.prototype[name] = function stamped(...args) {
      const doc = original.apply(this, args);
      doc._etag = `"${randomUUID()}"`;
      return doc;
    };
  });
}

// The _rids of each partition's items, per store (Items), so that a query
// scoped to a partition reads that partition only: the stock store keeps one
// map per container, and a scan of it per query cost a millisecond at a
// thousand items. Every item write goes through _set and delete.
const partitionRids = new WeakMap();

function ridsOf(store) {
  let byPartition = partitionRids.get(store);
  if (!byPartition) {
    byPartition = new Map();
    partitionRids.set(store, byPartition);
  }
  return byPartition;
}

function indexPartitions() {
  const set = Items.prototype._set;
  Items.prototype._set = function indexed(data) {
    const item = set.call(this, data);
    const byPartition = ridsOf(this);
    const partition = this._getPartition(data);
    if (!byPartition.has(partition)) byPartition.set(partition, new Set());
    byPartition.get(partition).add(data._rid);
    return item;
  };
  const del = Items.prototype.delete;
  Items.prototype.delete = function unindexed(idOrRid, partition) {
    const data = this._item("/id", idOrRid, partition).read();
    del.call(this, idOrRid, partition);
    const rids = data && ridsOf(this).get(this._getPartition(data));
    if (rids) {
      rids.delete(data._rid);
      if (rids.size === 0) ridsOf(this).delete(this._getPartition(data));
    }
  };
}

// The items of one partition, in the store's order.
function itemsOfPartition(store, partition) {
  const rids = ridsOf(store).get(partition) || [];
  return [...rids].map(rid => store._data.get(rid).read());
}

function ifMatchHolds(req, doc) {
  const ifMatch = req.headers["if-match"];
  return !ifMatch || ifMatch === "*" || ifMatch === doc._etag;
}

// ---------------------------------------------------------------------------
// Time to live

function validTtl(value) {
  return value === -1 || (Number.isInteger(value) && value > 0);
}

// Seconds an item lives after its last write, or null when it never expires.
// An item's own ttl counts only when the container has TTL on.
function ttlOf(containerProps, doc) {
  const containerTtl = containerProps.defaultTtl;
  if (containerTtl === undefined || containerTtl === null) return null;
  const ttl = typeof doc.ttl === "number" ? doc.ttl : containerTtl;
  return ttl > 0 ? ttl : null;
}

// Cosmos DB expires an item at _ts + ttl, and _ts is the last write's time
// in whole seconds: up to a second before the write's time + ttl. Expiring
// at that earliest moment lets tests catch a lock lease that forgets it.
function expired(containerProps, doc, now) {
  const ttl = ttlOf(containerProps, doc);
  if (ttl === null) return false;
  return now >= (doc._ts + ttl) * 1000;
}

// Removes the container's expired items.
function purgeExpired(container) {
  const { props, documents } = container;
  if (props.defaultTtl === undefined || props.defaultTtl === null) return;
  const now = Date.now();
  [...documents._data.values()].forEach(item => {
    const doc = item.read();
    if (doc && expired(props, doc, now)) {
      documents.delete(doc.id, documents._getPartition(doc));
    }
  });
}

// ---------------------------------------------------------------------------
// Containers, partitions, items

// Returns the live container of a request, its expired items removed.
function containerOf(account, { dbId, collId }) {
  const collection = account.database(dbId).collection(collId);
  const props = collection.read();
  if (!props) throw ownerNotFound();
  const container = { collection, props, documents: collection.documents };
  purgeExpired(container);
  return container;
}

// Parses the partition key header: null without one, else { value }. The
// value is undefined for the "none" partition key ([{}]).
function headerPartition(req) {
  const raw = req.headers[PARTITION_KEY_HEADER];
  if (raw === undefined) return null;
  let parsed;
  try {
    parsed = JSON.parse(Array.isArray(raw) ? raw[0] : raw);
  } catch (err) {
    throw badRequest(`Invalid ${PARTITION_KEY_HEADER} header: ${raw}`);
  }
  if (!Array.isArray(parsed)) parsed = [parsed];
  if (parsed.length === 0) return null;
  const [value] = parsed;
  return { value: value !== null && typeof value === "object" ? undefined : value };
}

function requirePartition(req) {
  const partition = headerPartition(req);
  if (!partition) {
    throw badRequest(
      "The partition key supplied in x-ms-partitionkey header has fewer components than defined in the collection."
    );
  }
  return partition;
}

function findItem(container, id, partitionValue) {
  return container.documents._item("/id", id, partitionValue).read();
}

function partitionOf(container, doc) {
  return container.documents._getPartition(doc);
}

// Checks the body of a create, replace or upsert and returns its partition
// key value, which must agree with the header when there is one.
function checkBody(container, req, body) {
  if (!body || typeof body !== "object" || Array.isArray(body)) {
    throw badRequest("The input content is invalid: expected a JSON object.");
  }
  if (typeof body.id !== "string" || body.id === "") {
    throw badRequest(
      "The input content is invalid because the required properties - 'id; ' - are missing"
    );
  }
  if (/[/\\?#]/.test(body.id)) {
    throw badRequest("The id contains one of the invalid characters '/', '\\', '?', '#'.");
  }
  // Cosmos DB's limit is in bytes of UTF-8, not in characters.
  if (Buffer.byteLength(body.id, "utf8") > 1023) {
    throw badRequest("The id is longer than the maximum of 1023 bytes.");
  }
  if (body.ttl !== undefined && body.ttl !== null && !validTtl(body.ttl)) {
    throw badRequest(`The input ttl '${body.ttl}' is invalid.`);
  }
  const value = partitionOf(container, body);
  if (typeof value === "string" && Buffer.byteLength(value, "utf8") > MAX_PARTITION_KEY_BYTES) {
    throw badRequest(
      `The partition key value is longer than the maximum of ${MAX_PARTITION_KEY_BYTES} bytes.`
    );
  }
  const partition = headerPartition(req);
  if (partition && partition.value !== value) {
    throw badRequest(
      "PartitionKey extracted from document doesn't match the one specified in the header."
    );
  }
  return value;
}

// Stock storage signals clashes with flags on plain errors.
function storeWrite(write) {
  try {
    return write();
  } catch (err) {
    if (err.conflict) throw conflict();
    if (err.badRequest) throw badRequest(err.message);
    throw err;
  }
}

// ---------------------------------------------------------------------------
// Document handlers

const createDocument = handler(async (account, req, res, params) => {
  const body = await readJSON(req);
  const container = containerOf(account, params);
  const partitionValue = checkBody(container, req, body);
  if (findItem(container, body.id, partitionValue)) throw conflict();
  const doc = storeWrite(() => container.documents.create(body));
  return written(req, res, 201, doc);
});

const readDocument = handler((account, req, res, params) => {
  const container = containerOf(account, params);
  const { value } = requirePartition(req);
  const doc = findItem(container, params.docId, value);
  if (!doc) throw notFound();
  return doc;
});

const replaceDocument = handler(async (account, req, res, params) => {
  const body = await readJSON(req);
  const container = containerOf(account, params);
  const { value } = requirePartition(req);
  const existing = findItem(container, params.docId, value);
  if (!existing) throw notFound();
  if (!ifMatchHolds(req, existing)) throw preconditionFailed();
  checkBody(container, req, body);
  if (body.id !== existing.id) throw badRequest("Replacing the id is not supported.");
  const doc = storeWrite(() => container.documents.replace(body, existing));
  return written(req, res, 200, doc);
});

// As in Cosmos DB, If-Match only applies when the item exists: an upsert of
// a missing item creates it whatever the If-Match header says.
const upsertDocument = handler(async (account, req, res, params) => {
  const body = await readJSON(req);
  const container = containerOf(account, params);
  const partitionValue = checkBody(container, req, body);
  const existing = findItem(container, body.id, partitionValue);
  if (existing && !ifMatchHolds(req, existing)) throw preconditionFailed();
  const doc = storeWrite(() =>
    existing
      ? container.documents.replace(body, existing)
      : container.documents.create(body)
  );
  return written(req, res, existing ? 200 : 201, doc);
});

const deleteDocument = handler((account, req, res, params) => {
  const container = containerOf(account, params);
  const { value } = requirePartition(req);
  const existing = findItem(container, params.docId, value);
  if (!existing) throw notFound();
  if (!ifMatchHolds(req, existing)) throw preconditionFailed();
  container.documents.delete(existing.id, partitionOf(container, existing));
  res.statusCode = 204;
  return undefined;
});

// Turns a patch condition ("FROM c WHERE ...") into a query, keeping its case.
function conditionQuery(condition) {
  const text = condition.trim();
  if (/^select\b/i.test(text)) return text;
  if (/^from\b/i.test(text)) return `SELECT * ${text}`;
  if (/^where\b/i.test(text)) return `SELECT * FROM c ${text}`;
  throw badRequest("Invalid condition in patch request.");
}

function conditionHolds(container, doc, condition) {
  let result;
  try {
    result = container.documents
      ._getQuery(conditionQuery(condition))
      .exec([doc], {});
  } catch (err) {
    if (err instanceof RequestError) throw err;
    throw badRequest(`Invalid condition in patch request: ${err.message}`);
  }
  return result.result.length > 0;
}

const patchDocument = handler(async (account, req, res, params) => {
  const body = await readJSON(req);
  const container = containerOf(account, params);
  const { value } = requirePartition(req);
  const existing = findItem(container, params.docId, value);
  if (!existing) throw notFound();
  if (!ifMatchHolds(req, existing)) throw preconditionFailed();

  const operations = Array.isArray(body) ? body : body && body.operations;
  if (!Array.isArray(operations)) {
    throw badRequest("Invalid patch request: check syntax of patch specification.");
  }
  const condition = Array.isArray(body) ? undefined : body.condition;
  if (condition && !conditionHolds(container, existing, condition)) {
    throw new RequestError(
      412,
      "PreconditionFailed",
      "Condition specified in the patch request is not satisfied."
    );
  }

  // The stock patch does the operations; we did the checks above.
  const result = patchOperation(container.collection, {
    id: existing.id,
    partitionKey: req.headers[PARTITION_KEY_HEADER],
    operations
  });
  if (result.statusCode !== 200) {
    res.statusCode = result.statusCode;
    return result.body;
  }
  return written(req, res, 200, result.body);
});

// Query results by continuation token. The stock engine re-reads every item
// of the container for each page, so paging through N items cost O(N^2); a
// query's full result is computed once, on its first page, and later pages
// are sliced from it (like Cosmos, a query is not a snapshot across pages
// anyway). Entries expire after a minute.
const queryPages = new Map(); // token -> { items, expires }
const QUERY_PAGE_TTL_MS = 60 * 1000;

function pageOf(token, offset, maxItemCount) {
  const now = Date.now();
  for (const [key, entry] of queryPages) {
    if (entry.expires < now) queryPages.delete(key);
  }
  const entry = queryPages.get(token);
  if (!entry) {
    throw badRequest("The continuation token has expired or is not valid.");
  }
  const size = maxItemCount > 0 ? maxItemCount : entry.items.length;
  const result = entry.items.slice(offset, offset + size);
  const next = offset + result.length;
  if (next >= entry.items.length) {
    queryPages.delete(token);
    return { result, continuation: null };
  }
  entry.expires = now + QUERY_PAGE_TTL_MS;
  return { result, continuation: { opstatusQuery: token, offset: next } };
}

// Queries run over the live items of the request's partition, or of all
// partitions for a cross-partition query.
const queryDocuments = handler((account, req, res, params) =>
  readItems(req, res, "Documents", async ({ continuation, maxItemCount }) => {
    const body = await readJSON(req);
    if (!body || typeof body.query !== "string") {
      throw badRequest("The query is missing.");
    }
    if (continuation && typeof continuation.opstatusQuery === "string") {
      return pageOf(continuation.opstatusQuery, continuation.offset | 0, maxItemCount);
    }
    const container = containerOf(account, params);
    const { documents } = container;
    // A syntax error thrown here becomes a 400 in readItems.
    const query = documents._getQuery(body.query);

    const partition = headerPartition(req);
    let items;
    if (partition) {
      items = itemsOfPartition(documents, partition.value);
    } else {
      items = [...documents._data.values()].map(item => item.read());
      if (!trueHeader(req, "x-ms-documentdb-query-enablecrosspartition")) {
        const paths = (container.props.partitionKey || {}).paths || [];
        if (paths.length && !query.containsPartitionKeys(paths)) {
          throw badRequest(
            "Cross partition query is required but disabled. Please set x-ms-documentdb-query-enablecrosspartition to true."
          );
        }
      }
    }

    let all;
    try {
      all = query.exec(items, {
        parameters: body.parameters,
        udf: documents._userDefinedFunctions(),
        maxItemCount: null,
        continuation: null,
        compositeIndexes:
          (container.props.indexingPolicy || {}).compositeIndexes || []
      });
    } catch (err) {
      throw badRequest(err.message);
    }
    const token = randomUUID();
    queryPages.set(token, { items: all.result, expires: Date.now() + QUERY_PAGE_TTL_MS });
    return pageOf(token, 0, maxItemCount);
  })
);

// ---------------------------------------------------------------------------
// Other handlers, wrapping the stock ones

// The stock account lists https://host:port in its locations whatever the
// server speaks. The Go SDK takes only the host and port from them, but other
// clients take the whole URL.
function withServedLocations(stockHandler) {
  return (account, req, res, params) => {
    const data = stockHandler(account, req, res, params);
    const scheme = req.socket.encrypted ? "https" : "http";
    const endpoint = `${scheme}://${req.headers.host}/`;
    const relocate = locations =>
      (locations || []).map(location => ({
        ...location,
        databaseAccountEndpoint: endpoint
      }));
    return {
      ...data,
      writableLocations: relocate(data.writableLocations),
      readableLocations: relocate(data.readableLocations)
    };
  };
}

// Stock partition key range ids (and parents) are numbers; Cosmos DB uses
// strings, and the Go SDK fails to decode numbers.
function withStringRangeIds(stockHandler) {
  return async (account, req, res, params) => {
    const body = await stockHandler(account, req, res, params);
    if (body && Array.isArray(body.PartitionKeyRanges)) {
      body.PartitionKeyRanges = body.PartitionKeyRanges.map(range => ({
        ...range,
        id: String(range.id),
        parents: (range.parents || []).map(String)
      }));
    }
    return body;
  };
}

// The feed of all items and batches must not see expired items.
function withoutExpired(stockHandler) {
  return handler((account, req, res, params) => {
    containerOf(account, params);
    return stockHandler(account, req, res, params);
  });
}

// Rejects a defaultTtl that Cosmos DB would reject; the stock handler stores
// the property and returns it on reads.
function withValidTtl(stockHandler) {
  return handler(async (account, req, res, params) => {
    const body = await readJSON(req);
    const ttl = body && body.defaultTtl;
    if (ttl !== undefined && ttl !== null && !validTtl(ttl)) {
      throw badRequest(`The input defaultTtl '${ttl}' is invalid.`);
    }
    return stockHandler(account, req, res, params);
  });
}

// Stock replace builds a new, empty container; move the items (and UDFs)
// over, as replacing a container's properties keeps its items in Cosmos DB.
function keepingItems(stockHandler) {
  return async (account, req, res, params) => {
    const old = account.database(params.dbId).collection(params.collId);
    const body = await stockHandler(account, req, res, params);
    const replaced = account.database(params.dbId).collection(params.collId);
    if (res.statusCode < 300 && replaced !== old) {
      replaced.documents = old.documents;
      replaced.documents._parent = replaced;
      replaced.userDefinedFunctions = old.userDefinedFunctions;
      replaced.userDefinedFunctions._parent = replaced;
    }
    return body;
  };
}

// Cosmos DB's limits on what a request carries: a request (an item with
// it) of at most 2 MB, a partition key value of at most 2 KB (containers
// with large partition keys, as every one created since 2019).
const MAX_REQUEST_BYTES = 2 * 1024 * 1024;
const MAX_PARTITION_KEY_BYTES = 2048;

// Reads a request's body as JSON, refusing as Cosmos DB does a body over
// MAX_REQUEST_BYTES (413) and one that is not JSON (400).
async function readLimitedJSON(req) {
  let body;
  try {
    body = await rawBody(req, { limit: MAX_REQUEST_BYTES });
  } catch (err) {
    if (err.type === "entity.too.large") {
      throw new RequestError(413, "RequestEntityTooLarge", "Request size is too large");
    }
    throw err;
  }
  try {
    return JSON.parse(body.toString());
  } catch (err) {
    throw badRequest("The request payload is invalid: it is not valid JSON.");
  }
}

// Memoizes the body reader per request, so that a wrapper can read the
// body before the stock handler it wraps reads it again.
function rereadableBodies() {
  const bodies = new WeakMap();
  jsonBody.default = req => {
    if (!bodies.has(req)) bodies.set(req, readLimitedJSON(req));
    return bodies.get(req);
  };
}

let installed = false;

/**
 * Installs the replacement handlers. Call it before loading the stock
 * server (lib/index), which builds its routes from the handler modules.
 */
function install() {
  if (installed) return;
  installed = true;
  rereadableBodies();
  stampWrites();
  indexPartitions();

  const replace = (name, make) => {
    const mod = stockModule(`lib/handler/${name}`);
    mod.default = make(mod.default);
  };
  replace("create-document", () => createDocument);
  replace("read-document", () => readDocument);
  replace("replace-document", () => replaceDocument);
  replace("upsert-document", () => upsertDocument);
  replace("delete-document", () => deleteDocument);
  replace("patch-document", () => patchDocument);
  replace("query-documents", () => queryDocuments);
  replace("read-documents", withoutExpired);
  replace("batch-documents", withoutExpired);
  replace("read-partition-key-ranges", withStringRangeIds);
  replace("read-meta", withServedLocations);
  replace("create-collection", withValidTtl);
  replace("replace-collection", stockHandler => withValidTtl(keepingItems(stockHandler)));
}

module.exports = {
  install,
  // For the change feed (changefeed.js), which answers in the same terms.
  handler,
  RequestError,
  badRequest,
  readJSON,
  containerOf,
  headerPartition
};
