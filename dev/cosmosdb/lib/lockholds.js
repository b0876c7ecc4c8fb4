"use strict";

// Lock holds, for benchmarks: how long each subscription lock item lived,
// as a frontend waiting for it sees it, from the answer to the create that
// made it to the answer to the delete that removed it. The server measures
// it because both clients (opstatus and the frontend) reach it directly,
// and a proxy in the path would cost more CPU per request than the server.
//
// GET /_opstatus/locks/<database> answers a JSON object
// {"holds":[{"id","owner","start","end"}],"expired":n}: start and end in
// milliseconds since the Unix epoch (fractional), owner the x-opstatus-owner
// header of the create (empty when absent). An item that was created again
// without a delete in between (it expired, or its delete failed) counts in
// expired and has no hold. Only the Locks container of each database is
// watched, and only creates answered 201 and deletes answered 204.

const LOCKS_PREFIX = "/_opstatus/locks/";
const LOCKS_CONTAINER = "Locks";
const OWNER_HEADER = "x-opstatus-owner";

// database -> {open: Map(id -> {owner, start}), holds: [], expired: n}
const byDatabase = new Map();

const now = () => performance.timeOrigin + performance.now();

function state(database) {
  let s = byDatabase.get(database);
  if (!s) {
    s = { open: new Map(), holds: [], expired: 0 };
    byDatabase.set(database, s);
  }
  return s;
}

// The lock item's id: its partition key (the container's key path is /id)
// for a create, the last path segment for a delete.
function itemID(req, kind, segs) {
  if (kind === "delete") return segs[5];
  try {
    const pk = JSON.parse(req.headers["x-ms-documentdb-partitionkey"] || "null");
    return Array.isArray(pk) && typeof pk[0] === "string" ? pk[0] : undefined;
  } catch {
    return undefined;
  }
}

/**
 * observe records the request's effect on a lock item once its answer has
 * been sent, timed when the answer was written. database, container, kind and segs are counts.js's view of it.
 */
function observe(req, res, database, container, kind, segs) {
  if (container !== LOCKS_CONTAINER || (kind !== "create" && kind !== "delete")) return;
  const id = itemID(req, kind, segs);
  if (id === undefined) return;
  const owner = String(req.headers[OWNER_HEADER] || "");
  // The time the answer's head is written (res.end writes it through
  // writeHead too), not its "finish": on a loaded machine "finish" can run
  // after the client has read the answer and acted on it.
  let answered;
  const writeHead = res.writeHead;
  res.writeHead = function (...args) {
    answered ??= now();
    return writeHead.apply(this, args);
  };
  res.on("finish", () => {
    const s = state(database);
    const at = answered ?? now();
    if (kind === "create" && res.statusCode === 201) {
      if (s.open.has(id)) s.expired += 1;
      s.open.set(id, { owner, start: at });
    } else if (kind === "delete" && res.statusCode === 204) {
      const open = s.open.get(id);
      if (!open) return;
      s.open.delete(id);
      s.holds.push({ id, owner: open.owner, start: open.start, end: at });
    }
  });
}

/** answers GET /_opstatus/locks/<database>; false for any other request. */
function answer(req, res) {
  if (req.method !== "GET" || !req.url.startsWith(LOCKS_PREFIX)) return false;
  let database;
  try {
    database = decodeURIComponent(req.url.split("?", 1)[0].slice(LOCKS_PREFIX.length));
  } catch {
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ code: "BadRequest", message: "malformed database name" }));
    return true;
  }
  const s = byDatabase.get(database) || { holds: [], expired: 0 };
  const body = JSON.stringify({ holds: s.holds, expired: s.expired });
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
  return true;
}

module.exports = { observe, answer };
