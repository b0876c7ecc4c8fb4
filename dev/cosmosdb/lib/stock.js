"use strict";

// Access to the modules of the stock @vercel/cosmosdb-server package and of
// its query engine (@zeit/cosmosdb-query). Dependencies are resolved from the
// stock package's own folder so that we patch the very module instances it
// uses, wherever npm placed them.

const path = require("path");

const root = path.dirname(
  require.resolve("@vercel/cosmosdb-server/package.json")
);

/** Loads a file of the stock server, e.g. "lib/handler/read-document". */
function stockModule(relative) {
  // eslint-disable-next-line global-require, import/no-dynamic-require
  return require(path.join(root, relative));
}

/** Loads a module the stock server depends on, e.g. "@zeit/cosmosdb-query/lib/parser". */
function dependency(specifier) {
  // eslint-disable-next-line global-require, import/no-dynamic-require
  return require(require.resolve(specifier, { paths: [root] }));
}

module.exports = { stockModule, dependency };
