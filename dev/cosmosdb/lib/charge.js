"use strict";

// A model of Cosmos DB's request charge (x-ms-request-charge), which the
// stock server answers as 1 for everything. It is a model, not Cosmos DB's
// formula: a point read costs 1 RU per KB of the item (at least 1), a
// replace 10.8 RU and a create or delete 7 RU for an item of up to 1 KB
// (dev/bench/cost.go's ruReplace and ruLockOp, from the worked examples of
// "Request Units in Azure Cosmos DB"), plus 1 RU for each further KB; a
// request that fails (404, 409, 412, ...) costs 1 RU. Queries, feeds and
// metadata keep the stock charge.

const KB = 1024;

const writeBase = { replace: 10.8, create: 7, upsert: 10.8, delete: 7 };

/**
 * of returns the modelled charge of a request of kind (counts.js's kinds)
 * answered with status and a body of bytes, or null to leave the stock one.
 */
function of(kind, status, bytes) {
  const kbs = Math.max(1, Math.ceil(bytes / KB));
  if (kind === "read") return status === 200 ? kbs : 1;
  if (kind in writeBase) return status >= 200 && status < 300 ? writeBase[kind] + (kbs - 1) : 1;
  return null;
}

/** wrap makes res answer the modelled charge of a request of kind. */
function wrap(res, kind) {
  const end = res.end;
  res.end = function (chunk, ...rest) {
    if (!res.headersSent) {
      const bytes = typeof chunk === "string" || Buffer.isBuffer(chunk) ? Buffer.byteLength(chunk) : 0;
      const ru = of(kind, res.statusCode, bytes);
      if (ru !== null) res.setHeader("x-ms-request-charge", ru.toFixed(2));
    }
    return end.call(this, chunk, ...rest);
  };
}

module.exports = { of, wrap };
