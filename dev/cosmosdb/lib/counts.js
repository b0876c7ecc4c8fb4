"use strict";

// Request counts, for benchmarks: every request the server answers is
// counted by database, container, kind and status, so that a benchmark can
// tell what a client cost without a counting proxy in the path (a proxy
// costs more CPU per request than the server itself).
//
// GET /_opstatus/counts/<database> answers a JSON array of
// {"container","kind","status","count"}. The path is outside the Cosmos DB
// REST API (whose paths start with /dbs or are the account's "/").
//
// Kinds are those dev/faultproxy gives requests (request.go; the same rules,
// kept in step by hand): read, query, create, upsert, replace, delete,
// patch, batch, meta; and changefeed, a read of a container's feed with
// A-IM, which the proxy counts as a read. A request whose connection closed before its
// answer was sent is counted with status 0.

const charge = require("./charge");
const lockHolds = require("./lockholds");

const COUNTS_PREFIX = "/_opstatus/counts/";

// database -> Map("container\0kind\0status" -> count)
const byDatabase = new Map();

const isTrue = value => String(value || "").trim().toLowerCase() === "true";

// The path's segments, unescaped, as dev/faultproxy reads them.
function segments(url) {
  const path = url.split("?", 1)[0].replace(/^\/+|\/+$/g, "");
  if (path === "") return [];
  return path.split("/").map(s => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  });
}

// classify returns the request's database, container and kind.
function classify(req) {
  const segs = segments(req.url);
  const database = segs.length >= 2 && segs[0] === "dbs" ? segs[1] : "";
  const container = database && segs.length >= 4 && segs[2] === "colls" ? segs[3] : "";
  let kind = "meta";
  if (container && segs[4] === "docs" && segs.length === 5) {
    if (req.method === "GET") kind = req.headers["a-im"] ? "changefeed" : "read";
    if (req.method === "POST") {
      const h = req.headers;
      if (isTrue(h["x-ms-documentdb-isquery"]) || String(h["content-type"] || "").startsWith("application/query+json")) {
        kind = "query";
      } else if (isTrue(h["x-ms-cosmos-is-batch-request"])) {
        kind = "batch";
      } else if (isTrue(h["x-ms-documentdb-is-upsert"])) {
        kind = "upsert";
      } else {
        kind = "create";
      }
    }
  } else if (container && segs[4] === "docs" && segs.length === 6) {
    kind = { GET: "read", PUT: "replace", DELETE: "delete", PATCH: "patch" }[req.method] || "meta";
  }
  return { database, container, kind, segs };
}

function count(database, key) {
  let m = byDatabase.get(database);
  if (!m) {
    m = new Map();
    byDatabase.set(database, m);
  }
  m.set(key, (m.get(key) || 0) + 1);
}

function answerCounts(req, res) {
  let database;
  try {
    database = decodeURIComponent(req.url.split("?", 1)[0].slice(COUNTS_PREFIX.length));
  } catch {
    // A throw here would end the server: it runs in the request listener.
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ code: "BadRequest", message: "malformed database name" }));
    return;
  }
  const out = [];
  for (const [key, n] of byDatabase.get(database) || []) {
    const [container, kind, status] = key.split("\0");
    out.push({ container, kind, status: Number(status), count: n });
  }
  const body = JSON.stringify(out);
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * install makes server count the requests it answers and serve the counts,
 * time the lock holds (lockholds.js) and answer the modelled request
 * charge (charge.js).
 * Call it after the server's request listener is in place.
 */
function install(server) {
  const listeners = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    if (req.method === "GET" && req.url.startsWith(COUNTS_PREFIX)) {
      answerCounts(req, res);
      return;
    }
    if (lockHolds.answer(req, res)) return;
    const { database, container, kind, segs } = classify(req);
    lockHolds.observe(req, res, database, container, kind, segs);
    charge.wrap(res, kind);
    const prefix = `${container}\0${kind}\0`;
    let counted = false;
    const done = status => {
      if (counted) return;
      counted = true;
      count(database, prefix + status);
    };
    res.on("finish", () => done(res.statusCode));
    res.on("close", () => done(0));
    for (const l of listeners) l.call(server, req, res);
  });
}

module.exports = { install };
