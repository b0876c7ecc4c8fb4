#!/usr/bin/env node
"use strict";

// A local Cosmos DB server for opstatus tests: @vercel/cosmosdb-server with
// the fixes in ./lib (see handlers.js, query.js and changefeed.js), counting
// the requests it answers (counts.js).
//
// Usage: node dev/cosmosdb/server.js [--port N] [--host 127.0.0.1] [--no-ssl]
//
// --port 0 (the default) picks a free port. Once listening it prints one line,
// "ready <scheme>://<host>:<port>", on stdout. SIGTERM or SIGINT stop it.

const counts = require("./lib/counts");
const changefeed = require("./lib/changefeed");
const handlers = require("./lib/handlers");
const query = require("./lib/query");
const { stockModule } = require("./lib/stock");

function usage(message) {
  if (message) process.stderr.write(`${message}\n`);
  process.stderr.write(
    "usage: node dev/cosmosdb/server.js [--port N] [--host 127.0.0.1] [--no-ssl]\n"
  );
  process.exit(2);
}

function parseArgs(argv) {
  const args = { port: 0, host: "127.0.0.1", ssl: true };
  for (let i = 0; i < argv.length; i += 1) {
    switch (argv[i]) {
      case "--port":
      case "-p":
        i += 1;
        args.port = Number(argv[i]);
        if (!Number.isInteger(args.port) || args.port < 0 || args.port > 65535) {
          usage(`invalid port: ${argv[i]}`);
        }
        break;
      case "--host":
        i += 1;
        if (!argv[i]) usage("--host needs a value");
        args.host = argv[i];
        break;
      case "--no-ssl":
        args.ssl = false;
        break;
      case "--help":
      case "-h":
        usage();
        break;
      default:
        usage(`unknown argument: ${argv[i]}`);
    }
  }
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));

  // All must be in place before the stock server module loads its routes.
  query.install();
  handlers.install();
  changefeed.install();
  const { createHttpServer, createHttpsServer } = stockModule("lib/index");

  // keepAlive: the stock server otherwise closes every connection.
  const create = args.ssl ? createHttpsServer : createHttpServer;
  const server = create({ keepAlive: true });
  // Outlive the clients' idle timeout (90 s in the Go SDK), so that a client
  // never reuses a connection the server is closing.
  server.keepAliveTimeout = 120 * 1000;
  counts.install(server);

  server.on("error", err => {
    process.stderr.write(`cosmosdb server: ${err.message}\n`);
    process.exit(1);
  });

  server.listen(args.port, args.host, () => {
    const { port } = server.address();
    const host = args.host.includes(":") ? `[${args.host}]` : args.host;
    process.stdout.write(`ready ${args.ssl ? "https" : "http"}://${host}:${port}\n`);
  });

  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
    // Do not hang on a request that is still being handled.
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main();
