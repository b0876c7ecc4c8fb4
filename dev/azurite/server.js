#!/usr/bin/env node
"use strict";

// Azurite for opstatus tests and benchmarks: the pinned npm package with
// fixes to its metadata store (LokiJS) that keep a queue of thousands of
// messages fast, and to two costs it pays on every request. Queue
// semantics are unchanged (internal/testenv's tests).
//
// Usage: node dev/azurite/server.js <azurite|azurite-queue> [azurite flags]
//
// 1. LokiJS rebuilds every index of a collection (a sort of the whole
//    collection per index) whenever it removes an array of documents, even
//    an empty one. Azurite removes an array of expired messages, usually
//    none, on every queue request, and its garbage collector removes each
//    extent as an array: each request cost O(N log N) in the messages held,
//    a garbage collection O(N² log N).
// 2. Azurite indexes messages by account and queue name (one value each)
//    and by a field they do not have, so every lookup by message id or
//    expiry scanned every message. Messages are indexed by id, expiry and
//    visibility instead, and a query evaluates its indexed fields first.
// 3. Azurite's uuid (3.x) asks OpenSSL for 16 random bytes per uuid, one
//    to three per queue request, and each pop receipt for 2 more; they come
//    from a pool refilled 4 KiB at a time (what uuid 8 and
//    crypto.randomUUID do).
// 4. Azurite parses the URI template of every operation of the request's
//    method on every request to find the operation; a parsed template is
//    immutable (fromUri and fill only read it), so each is parsed once.
//
// Fixes 1 and 2, measured with 2,000 messages (enqueued one at a time, then
// dequeued 16 at a time and deleted): Azurite's CPU 21.5 s stock, 8.2 s
// with them; dequeue and delete 8.2 ms a message stock, 1.6 ms with them.
// 5,000 messages through 16 clients at a time, both servers running at
// once on two cores: 2 min 47 s stock, 24 s with them; the garbage
// collection that followed stalled the wrapped queue 0.3 s.
// Fixes 3 and 4, measured with 1,000 messages enqueued one at a time, then
// dequeued 32 at a time and deleted 32 at once (dev/bench's pattern), 12
// rounds alternating on a shared two-core machine: Azurite's CPU 1.80 ms a
// message with fixes 1 and 2 only, 1.66 ms with all four.

const Loki = require("lokijs");

// Fix 1: remove small batches one document at a time, which updates the
// indexes in place. Arrays of documents come through removeBatch, query
// results (findAndRemove) through removeBatchByPositions.
const removeBatch = Loki.Collection.prototype.removeBatch;
const removeBatchByPositions = Loki.Collection.prototype.removeBatchByPositions;

// batchLimit is the largest batch removed one document at a time; above it
// the stock rebuild (O(N log N) once) is cheaper than per-document splices.
const batchLimit = 64;

Loki.Collection.prototype.removeBatch = function (batch) {
  if (batch.length > batchLimit) {
    removeBatch.call(this, batch);
    return;
  }
  for (const item of batch) {
    const doc = typeof item === "object" ? item : this.get(item);
    if (doc) this.remove(doc);
  }
};

Loki.Collection.prototype.removeBatchByPositions = function (positions) {
  if (positions.length > batchLimit) {
    removeBatchByPositions.call(this, positions);
    return;
  }
  // Positions shift as documents go: take the documents first.
  const docs = positions.map((p) => this.data[p]);
  for (const doc of docs) {
    if (doc) this.remove(doc);
  }
};

// Fix 2: the messages' indexes.
const addCollection = Loki.prototype.addCollection;
Loki.prototype.addCollection = function (name, options) {
  if (name === "$MESSAGES_COLLECTION$" && options && options.indices) {
    options = { ...options, indices: ["messageId", "expirationTime", "timeNextVisible"] };
  }
  return addCollection.call(this, name, options);
};

// A query object with several fields is an AND evaluated in field order,
// and only the first can use an index: evaluate indexed fields first, so
// that a lookup by message id no longer scans every message.
const find = Loki.Resultset.prototype.find;
Loki.Resultset.prototype.find = function (query, firstOnly) {
  if (query && typeof query === "object" && !this.filterInitialized) {
    const keys = Object.keys(query);
    const indexed = keys.filter((k) => Object.hasOwn(this.collection.binaryIndices, k));
    if (keys.length > 1 && indexed.length > 0 && indexed.length < keys.length && keys[0] !== indexed[0]) {
      const ordered = {};
      for (const k of indexed) ordered[k] = query[k];
      for (const k of keys) if (!Object.hasOwn(ordered, k)) ordered[k] = query[k];
      query = ordered;
    }
  }
  return find.call(this, query, firstOnly);
};

// Fix 3: random bytes from a pool. uuid's v1 and v4 take their generator
// when they load, so the module's export is replaced before Azurite loads
// them; every call returns a copy (v4 modifies it). Azurite's handlers call
// getPopReceipt through its module's exports.
const crypto = require("crypto");
const path = require("path");
// Resolved from Azurite's directory: the copies Azurite itself loads.
const azuriteDir = path.dirname(require.resolve("azurite/package.json"));
const randomPool = new Uint8Array(4096);
let randomNext = randomPool.length;
function pooledRandomBytes(n) {
  if (randomNext > randomPool.length - n) {
    crypto.randomFillSync(randomPool);
    randomNext = 0;
  }
  randomNext += n;
  return Buffer.from(randomPool.subarray(randomNext - n, randomNext));
}
const rngPath = require.resolve("uuid/lib/rng", { paths: [azuriteDir] });
require(rngPath);
require.cache[rngPath].exports = () => pooledRandomBytes(16);
const queueUtils = require(path.join(azuriteDir, "dist/src/queue/utils/utils.js"));
// Azurite 3.35.0's getPopReceipt, its randomValueHex(4) inlined.
queueUtils.getPopReceipt = function getPopReceipt(requestDate) {
  const encodedStr =
    requestDate.toUTCString().split(" ").slice(1, 5).join("") + pooledRandomBytes(2).toString("hex").slice(0, 4);
  return Buffer.from(encodedStr).toString("base64");
};

// Fix 4: one parse per URI template. The cache holds the templates of
// Azurite's operation specifications, a fixed set.
const uriTemplatesPath = require.resolve("uri-templates", { paths: [azuriteDir] });
const UriTemplate = require(uriTemplatesPath);
const parsedTemplates = new Map();
function cachedUriTemplate(template) {
  let t = parsedTemplates.get(template);
  if (t === undefined) {
    t = new UriTemplate(template);
    parsedTemplates.set(template, t);
  }
  return t;
}
cachedUriTemplate.prototype = UriTemplate.prototype;
require.cache[uriTemplatesPath].exports = cachedUriTemplate;

const mains = {
  azurite: "azurite/dist/src/azurite.js",
  "azurite-queue": "azurite/dist/src/queue/main.js",
};

const which = process.argv[2];
if (!Object.hasOwn(mains, which)) {
  process.stderr.write("usage: node dev/azurite/server.js <azurite|azurite-queue> [azurite flags]\n");
  process.exit(2);
}
// Azurite reads its flags from process.argv.
process.argv.splice(2, 1);
require(mains[which]);
