'use strict';
// Preloaded into every `sf` process the tests start (NODE_OPTIONS=--require this file):
// 1. refuses every connection and DNS lookup that is not loopback, so the CLI cannot reach
//    salesforce.com, npm or a telemetry endpoint even if an opt-out env var stops working;
// 2. records each refusal, each child process and each HTTP exchange made through undici (what jsforce and
//    @salesforce/core use) as JSON lines in $NEXUS_SF_TRACE: method, URL, status and the first
//    bytes of both bodies, with the Authorization and Cookie headers redacted.
const fs = require('node:fs');
const net = require('node:net');
const dns = require('node:dns');
const diagnostics = require('node:diagnostics_channel');
const { syncBuiltinESMExports } = require('node:module');

const TRACE = process.env.NEXUS_SF_TRACE;
const BODY_LIMIT = Number(process.env.NEXUS_SF_TRACE_BODY || 2000);
const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost', '::ffff:127.0.0.1']);
const SECRET_HEADERS = new Set(['authorization', 'cookie', 'set-cookie']);

function record(entry) {
  if (!TRACE) return;
  try {
    fs.appendFileSync(TRACE, `${JSON.stringify({ pid: process.pid, ...entry })}\n`);
  } catch {
    // tracing must never change what the CLI does
  }
}

// ---------------------------------------------------------------- no network but loopback
const originalConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function connect(...args) {
  let options = args[0];
  if (Array.isArray(options)) options = options[0]; // the internal normalized form
  let host;
  let port;
  if (options !== null && typeof options === 'object') {
    if (options.path) return originalConnect.apply(this, args); // a unix socket (IPC)
    host = options.host;
    port = options.port;
  } else if (typeof options === 'string' && Number.isNaN(Number(options))) {
    return originalConnect.apply(this, args); // a unix socket path
  } else {
    port = options;
    host = typeof args[1] === 'string' ? args[1] : undefined;
  }
  host = host || 'localhost';
  if (LOOPBACK.has(host) || host.startsWith('127.')) return originalConnect.apply(this, args);
  record({ blocked: `${host}:${port}` });
  const error = Object.assign(new Error(`netguard: connection to ${host}:${port} refused`), {
    code: 'ECONNREFUSED',
  });
  process.nextTick(() => this.destroy(error));
  return this;
};

function refusedName(hostname) {
  return !(LOOPBACK.has(hostname) || /^127\.\d+\.\d+\.\d+$/.test(hostname));
}

function notFound(hostname) {
  return Object.assign(new Error(`netguard: lookup of ${hostname} refused`), {
    code: 'ENOTFOUND',
    hostname,
  });
}

const originalLookup = dns.lookup;
dns.lookup = function lookup(hostname, ...rest) {
  if (refusedName(hostname)) {
    record({ blocked: `dns:${hostname}` });
    const callback = rest[rest.length - 1];
    process.nextTick(() => callback(notFound(hostname)));
    return {};
  }
  return originalLookup.call(this, hostname, ...rest);
};
const originalPromiseLookup = dns.promises.lookup;
dns.promises.lookup = async function lookup(hostname, ...rest) {
  if (refusedName(hostname)) {
    record({ blocked: `dns:${hostname}` });
    throw notFound(hostname);
  }
  return originalPromiseLookup.call(this, hostname, ...rest);
};
for (const name of ['resolve', 'resolve4', 'resolve6', 'resolveAny', 'resolveCname']) {
  const original = dns[name];
  dns[name] = function resolve(hostname, ...rest) {
    if (refusedName(hostname)) {
      record({ blocked: `dns:${hostname}` });
      const callback = rest[rest.length - 1];
      process.nextTick(() => callback(notFound(hostname)));
      return undefined;
    }
    return original.call(this, hostname, ...rest);
  };
}
// child processes (an autoupdate, a telemetry uploader, a version check) are recorded
const childProcess = require('node:child_process');
for (const name of ['spawn', 'execFile', 'fork']) {
  const original = childProcess[name];
  childProcess[name] = function spawned(file, ...rest) {
    const args = Array.isArray(rest[0]) ? rest[0] : [];
    record({ spawn: [String(file), ...args.map(String)].join(' ').slice(0, 300) });
    return original.call(this, file, ...rest);
  };
}
syncBuiltinESMExports(); // `import { lookup } from 'node:dns'` sees the guarded functions too

// ---------------------------------------------------------------- what went over HTTP
if (TRACE) {
  const exchanges = new WeakMap();
  const text = (value) => (Buffer.isBuffer(value) ? value.toString('latin1') : String(value));
  function headerMap(flat) {
    const out = {};
    if (!Array.isArray(flat)) return out;
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const key = text(flat[i]).toLowerCase();
      out[key] = SECRET_HEADERS.has(key) ? '<redacted>' : text(flat[i + 1]);
    }
    return out;
  }
  function append(buffer, chunk) {
    if (buffer.length >= BODY_LIMIT) return buffer;
    return buffer + Buffer.from(chunk).toString('utf8').slice(0, BODY_LIMIT - buffer.length);
  }
  diagnostics.subscribe('undici:request:create', ({ request }) => {
    exchanges.set(request, {
      method: request.method,
      url: `${request.origin}${request.path}`,
      requestHeaders: headerMap(request.headers),
      requestBody: typeof request.body === 'string' ? request.body.slice(0, BODY_LIMIT) : '',
      responseBody: '',
      started: Date.now(),
    });
  });
  diagnostics.subscribe('undici:request:bodyChunkSent', ({ request, chunk }) => {
    const exchange = exchanges.get(request);
    if (exchange && typeof request.body !== 'string') {
      exchange.requestBody = append(exchange.requestBody, chunk);
    }
  });
  diagnostics.subscribe('undici:request:headers', ({ request, response }) => {
    const exchange = exchanges.get(request);
    if (!exchange) return;
    exchange.status = response.statusCode;
    exchange.responseHeaders = headerMap(response.headers);
  });
  diagnostics.subscribe('undici:request:bodyChunkReceived', ({ request, chunk }) => {
    const exchange = exchanges.get(request);
    if (exchange) exchange.responseBody = append(exchange.responseBody, chunk);
  });
  function finish(request, error) {
    const exchange = exchanges.get(request);
    if (!exchange) return;
    exchanges.delete(request);
    exchange.ms = Date.now() - exchange.started;
    delete exchange.started;
    if (error) exchange.error = String(error && error.message ? error.message : error);
    record(exchange);
  }
  diagnostics.subscribe('undici:request:trailers', ({ request }) => finish(request));
  diagnostics.subscribe('undici:request:error', ({ request, error }) => finish(request, error));
}
