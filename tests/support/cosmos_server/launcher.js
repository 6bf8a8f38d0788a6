#!/usr/bin/env node
// Local Cosmos DB stand-in for Weft's tests: @vercel/cosmosdb-server 1.0.1 (pinned in package.json)
// with its request handling and in-memory collections patched before it listens.
//
// The package as shipped cannot serve what Weft relies on (see docs/testing.md). This launcher keeps the
// package's router, account model, query engine and document operations, and replaces or wraps:
//   * transactional batch: partition key from the x-ms-documentdb-partitionkey header, all-or-nothing
//     with rollback, per-operation status codes (failing op + 424 for the rest) under HTTP 207;
//   * point read of a missing id: 404 instead of a 500 (TypeError);
//   * queries sent with a partition key: filtered to that logical partition (and no longer required to
//     name the partition key in WHERE);
//   * incremental change feed: a per-container LSN stamped on every write; ETag continuation progresses;
//   * TTL: container defaultTtl and per-item ttl enforced (expired items vanish before any request);
//   * HTTP keep-alive (the package answers "Connection: close", which caps it at ~40 ops/s).
//
// Usage: node launcher.js [--port N] [--host 127.0.0.1] [--exit-with-stdin]
// Prints one JSON line {"port": N} on stdout once listening. In-memory only.
"use strict";

const fs = require("fs");
const https = require("https");
const path = require("path");
const crypto = require("crypto");

const PKG_DIR = path.dirname(require.resolve("@vercel/cosmosdb-server/package.json"));
const EXPECTED_VERSION = "1.0.1";
const pkgVersion = JSON.parse(fs.readFileSync(path.join(PKG_DIR, "package.json"), "utf8")).version;
if (pkgVersion !== EXPECTED_VERSION) {
  // The patches below reach into internals; another version needs them re-checked.
  process.stderr.write(`cosmos launcher: expected @vercel/cosmosdb-server ${EXPECTED_VERSION}, found ${pkgVersion}\n`);
  process.exit(2);
}
const lib = (p) => require(path.join(PKG_DIR, "lib", p));

const Account = lib("account").default;
const routes = lib("routes").default;
const json = lib("json").default;
const trueHeader = lib("true-header").default;
const documentOperations = lib("handler/_document-operations");
const patchOperations = lib("handler/_patch-operations");
const readItems = lib("handler/_read-items").default;
const batchDocumentsHandler = lib("handler/batch-documents").default;
const readDocumentHandler = lib("handler/read-document").default;
const readDocumentsHandler = lib("handler/read-documents").default;
const queryDocumentsHandler = lib("handler/query-documents").default;
const Documents = lib("account/documents").default;

// ---------------------------------------------------------------------------------------------------
// Collection-level patches: LSN stamping (change feed) and TTL bookkeeping, both hooked on Items._set,
// which every create/replace/upsert/patch goes through.

let restoring = false; // a batch rollback re-inserts old documents verbatim (same _lsn, same _ts)

function nowSeconds() {
  return Date.now() / 1e3;
}

function containerDefaultTtl(documents) {
  const coll = documents._parent.read();
  if (!coll || coll.defaultTtl === undefined || coll.defaultTtl === null) return null;
  return coll.defaultTtl;
}

function trackTtl(documents, data) {
  if (!documents.__ttl) {
    documents.__ttl = new Map();
    documents.__nextExpiry = Infinity;
  }
  const def = containerDefaultTtl(documents);
  let effective = null;
  if (def !== null) {
    effective = typeof data.ttl === "number" ? data.ttl : def;
  }
  if (effective !== null && effective > 0) {
    const expires = data._ts + effective;
    documents.__ttl.set(data._rid, expires);
    if (expires < documents.__nextExpiry) documents.__nextExpiry = expires;
  } else {
    documents.__ttl.delete(data._rid);
  }
}

const originalSet = Documents.prototype._set;
Documents.prototype._set = function patchedSet(data) {
  if (!restoring) {
    this.__lsn = (this.__lsn || 0) + 1;
    data._lsn = this.__lsn;
  }
  trackTtl(this, data);
  return originalSet.call(this, data);
};

function purgeExpired(collection) {
  const documents = collection.documents;
  if (!documents.__ttl || documents.__ttl.size === 0) return;
  const now = nowSeconds();
  if (now < documents.__nextExpiry) return;
  let next = Infinity;
  for (const [rid, expires] of [...documents.__ttl.entries()]) {
    const item = documents._data.get(rid);
    const doc = item ? item.read() : undefined;
    if (!doc) {
      documents.__ttl.delete(rid);
    } else if (expires <= now) {
      documents.__ttl.delete(rid);
      documents.delete(doc.id, documents._getPartition(doc));
    } else if (expires < next) {
      next = expires;
    }
  }
  documents.__nextExpiry = next;
}

// ---------------------------------------------------------------------------------------------------
// Helpers

function partitionHeader(req) {
  const header = req.headers["x-ms-documentdb-partitionkey"];
  return Array.isArray(header) ? header[0] : header;
}

// Returns {present: false} when the request names no partition, else {present: true, value, raw}.
function parsePartition(req) {
  const raw = partitionHeader(req);
  if (!raw || raw === "[{}]" || raw === "[]") return { present: false };
  let parsed;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    return { present: true, invalid: true, raw };
  }
  const value = Array.isArray(parsed) ? parsed[0] : parsed;
  return { present: true, value, raw: JSON.stringify([value]) };
}

function notFound(res) {
  res.statusCode = 404;
  return { code: "NotFound", message: "Entity with the specified id does not exist in the system." };
}

function badRequest(res, message) {
  res.statusCode = 400;
  return { code: "BadRequest", message };
}

function samePartition(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// ---------------------------------------------------------------------------------------------------
// Replacement handlers

function readDocument(account, req, res, { dbId, collId, docId }) {
  const collection = account.database(dbId).collection(collId);
  if (!collection.read()) return notFound(res);
  const pk = parsePartition(req);
  if (pk.invalid) return badRequest(res, "invalid x-ms-documentdb-partitionkey header");
  const partition = pk.present ? pk.value : docId;
  const data = collection.document(docId, partition).read();
  if (!data) return notFound(res);
  if (pk.present && !samePartition(collection.documents._getPartition(data), pk.value)) return notFound(res);
  res.statusCode = 200;
  return data;
}

function queryDocuments(account, req, res, params) {
  if (trueHeader(req, "x-ms-cosmos-is-query-plan-request")) {
    return queryDocumentsHandler(account, req, res, params);
  }
  const pk = parsePartition(req);
  if (!pk.present || trueHeader(req, "x-ms-documentdb-query-enablecrosspartition")) {
    return queryDocumentsHandler(account, req, res, params);
  }
  if (pk.invalid) return badRequest(res, "invalid x-ms-documentdb-partitionkey header");
  const { dbId, collId } = params;
  return readItems(req, res, "Documents", async ({ continuation, maxItemCount }) => {
    const body = await json(req);
    if (!body.query) {
      res.statusCode = 400;
      return { message: "missing query" };
    }
    const collection = account.database(dbId).collection(collId);
    const coll = collection.read();
    if (!coll) return null;
    const documents = collection.documents;
    const data = [...documents._data.values()]
      .map((item) => item.read())
      .filter((doc) => samePartition(documents._getPartition(doc), pk.value));
    const compositeIndexes = (coll.indexingPolicy && coll.indexingPolicy.compositeIndexes) || [];
    try {
      return documents._getQuery(body.query).exec(data, {
        parameters: body.parameters,
        udf: documents._userDefinedFunctions(),
        maxItemCount,
        continuation,
        compositeIndexes,
      });
    } catch (err) {
      err.badRequest = true;
      throw err;
    }
  });
}

function changeFeed(account, req, res, { dbId, collId }) {
  const collection = account.database(dbId).collection(collId);
  if (!collection.read()) return notFound(res);
  const documents = collection.documents;
  const pk = parsePartition(req);
  if (pk.invalid) return badRequest(res, "invalid x-ms-documentdb-partitionkey header");
  const current = documents.__lsn || 0;
  const ifNoneMatch = req.headers["if-none-match"];
  let from = 0;
  if (ifNoneMatch === "*") {
    from = current;
  } else if (ifNoneMatch) {
    from = parseInt(String(ifNoneMatch).replace(/"/g, ""), 10) || 0;
  }
  const requested = parseInt(req.headers["x-ms-max-item-count"] || "", 10);
  const max = requested > 0 ? requested : 100;
  const changed = [...documents._data.values()]
    .map((item) => item.read())
    .filter((doc) => doc._lsn > from)
    .filter((doc) => !pk.present || samePartition(documents._getPartition(doc), pk.value))
    .sort((a, b) => a._lsn - b._lsn);
  const page = changed.slice(0, max);
  const etag = page.length && changed.length > max ? page[page.length - 1]._lsn : Math.max(from, current);
  res.setHeader("etag", `"${etag}"`);
  res.setHeader("x-ms-item-count", String(page.length));
  if (!page.length) {
    res.statusCode = 304;
    return null;
  }
  res.statusCode = 200;
  return { Documents: page, _count: page.length };
}

function runBatchOperation(collection, op, partitionRaw) {
  const input = { ...op, partitionKey: partitionRaw };
  switch (op.operationType) {
    case "Create":
      return documentOperations.createOperation(collection, input);
    case "Upsert":
      return documentOperations.upsertOperation(collection, input);
    case "Read":
      return documentOperations.readOperation(collection, input);
    case "Delete":
      return documentOperations.deleteOperation(collection, input);
    case "Replace":
      if (op.id && op.resourceBody && op.resourceBody.id !== op.id) {
        return { statusCode: 400, body: { message: "replacing id is not allowed" } };
      }
      return documentOperations.replaceOperation(collection, input);
    case "Patch":
      return patchOperations.patchOperation(collection, {
        id: op.id,
        partitionKey: partitionRaw,
        ifMatch: op.ifMatch,
        operations: (op.resourceBody || {}).operations || [],
        condition: (op.resourceBody || {}).condition,
      });
    default:
      return { statusCode: 400, body: { message: `Operation type '${op.operationType}' is not supported in Batch.` } };
  }
}

async function batchDocuments(account, req, res, params) {
  const pk = parsePartition(req);
  if (!pk.present) {
    // Ops carrying their own partitionKey (other SDKs) are what the package handles.
    return batchDocumentsHandler(account, req, res, params);
  }
  if (pk.invalid) return badRequest(res, "invalid x-ms-documentdb-partitionkey header");
  const body = await json(req);
  const collection = account.database(params.dbId).collection(params.collId);
  if (!collection.read()) return notFound(res);
  if (!Array.isArray(body) || body.length === 0) return badRequest(res, "Invalid request body");
  if (body.length > 100) return badRequest(res, "Batch request has more operations than what is supported.");
  const documents = collection.documents;

  const undo = new Map(); // id -> document as it was before the batch (or null)
  const results = [];
  let failedAt = -1;
  let failure = null;
  for (let i = 0; i < body.length; i += 1) {
    const op = body[i] || {};
    const id = op.id || (op.resourceBody && op.resourceBody.id);
    let result;
    if (!id) {
      result = { statusCode: 400, body: { message: "missing id" } };
    } else if (
      op.resourceBody &&
      !samePartition(documents._getPartition(op.resourceBody), pk.value)
    ) {
      result = { statusCode: 400, body: { code: "BadRequest", message: "PartitionKey extracted from document doesn't match the one specified in the header." } };
    } else if (op.ifNoneMatch && op.ifNoneMatch !== "*" && (collection.document(id, pk.value).read() || {})._etag === op.ifNoneMatch) {
      result = { statusCode: 304, body: null };
    } else {
      if (!undo.has(id)) undo.set(id, collection.document(id, pk.value).read() || null);
      try {
        result = runBatchOperation(collection, op, pk.raw);
      } catch (err) {
        result = { statusCode: err.conflict ? 409 : 400, body: { message: err.message } };
      }
    }
    if (result.statusCode >= 400) {
      failedAt = i;
      failure = result;
      break;
    }
    results.push({
      statusCode: result.statusCode,
      requestCharge: 1,
      eTag: result.body ? result.body._etag : undefined,
      resourceBody: op.operationType === "Delete" ? undefined : result.body,
    });
  }

  if (failedAt < 0) {
    res.statusCode = 200;
    return results;
  }

  // All or nothing: restore every touched document as it was, newest change first.
  for (const [id, old] of [...undo.entries()].reverse()) {
    if (collection.document(id, pk.value).read()) documents.delete(id, pk.value);
    if (old) {
      restoring = true;
      try {
        documents._set(old);
      } finally {
        restoring = false;
      }
    }
  }
  res.statusCode = 207;
  return body.map((_, i) =>
    i === failedAt
      ? {
          statusCode: failure.statusCode,
          requestCharge: 0,
          resourceBody: failure.body && failure.body.message ? { message: failure.body.message } : undefined,
        }
      : { statusCode: 424, requestCharge: 0 },
  );
}

const overrides = new Map([
  [batchDocumentsHandler, batchDocuments],
  [readDocumentHandler, readDocument],
  [queryDocumentsHandler, queryDocuments],
]);

// ---------------------------------------------------------------------------------------------------
// Request handling (the package's generateRequestHandler is not exported; this mirrors its response
// shaping with keep-alive on, and dispatches to the overrides above).

function handleRequest(account, req, res) {
  const route = routes(req);
  (async () => {
    let body;
    if (!route) {
      res.statusCode = 400;
      body = { message: "no route" };
    } else {
      const [params, routeHandler] = route;
      try {
        if (params.dbId && params.collId) {
          const collection = account.database(params.dbId).collection(params.collId);
          if (collection.read()) purgeExpired(collection);
        }
        let handler = overrides.get(routeHandler) || routeHandler;
        if (routeHandler === readDocumentsHandler && req.headers["a-im"]) handler = changeFeed;
        body = await handler(account, req, res, params);
      } catch (err) {
        process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
        body = { message: err.message };
        res.statusCode = 500;
      }
      if (res.statusCode > 399 && body && !body.message) body.message = "";
    }
    if (body && body._etag && !res.getHeader("etag")) res.setHeader("etag", body._etag);
    if (req.headers["a-im"] && res.statusCode === 200 && !res.getHeader("etag")) {
      // Other feeds (partition key ranges): one range that never changes, as the package answers.
      if (req.headers["if-none-match"]) res.statusCode = 304;
      res.setHeader("etag", "1");
    }
    res.setHeader("content-type", "application/json");
    res.setHeader("content-location", `https://${req.headers.host}${req.url}`);
    res.setHeader("connection", "keep-alive");
    res.setHeader("x-ms-activity-id", crypto.randomUUID());
    res.setHeader("x-ms-request-charge", "1");
    if (res.statusCode === 304 || body === null || body === undefined) {
      res.end();
    } else {
      res.end(JSON.stringify(body));
    }
  })().catch((err) => {
    process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
    if (!res.writableEnded) {
      res.statusCode = 500;
      res.end("");
    }
  });
}

function parseArgs(argv) {
  const args = { port: 0, host: "127.0.0.1" };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--port") args.port = parseInt(argv[(i += 1)], 10);
    else if (argv[i] === "--host") args.host = argv[(i += 1)];
  }
  return args;
}

function main() {
  const { port, host } = parseArgs(process.argv.slice(2));
  let account;
  const server = https.createServer(
    {
      cert: fs.readFileSync(path.join(PKG_DIR, "cert.pem")),
      key: fs.readFileSync(path.join(PKG_DIR, "key.pem")),
      minVersion: "TLSv1.2",
      rejectUnauthorized: false,
      requestCert: false,
    },
    (req, res) => handleRequest(account, req, res),
  );
  // Longer than any client pool's idle time, so a reused connection is not closed under a request.
  server.keepAliveTimeout = 120000;
  server.headersTimeout = 121000;
  server.listen(port, host, () => {
    const address = server.address();
    account = new Account(address.address, address.port);
    process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);
  });
  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  if (process.argv.includes("--exit-with-stdin")) {
    // The test process holds our stdin open: if it dies without stopping us, we stop too.
    process.stdin.on("end", stop);
    process.stdin.on("error", stop);
    process.stdin.resume();
  }
}

main();
