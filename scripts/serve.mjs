#!/usr/bin/env node
// A tiny static server for the ggweb demo: serves www/ on http://localhost:$PORT (default 8080)
// with correct MIME types (application/wasm for streaming compilation) and COOP/COEP headers
// (cross-origin isolation: SharedArrayBuffer, so ggweb loads its threads build), no caching. A
// page asked for with `?coi=0` comes without them (not isolated: the single-thread builds, and
// WebGPU, which the threads build lacks). `/` redirects to the demo. Usage: node scripts/serve.mjs
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'www');
// /models/* is served from the model cache that scripts/fetch-models.sh fills.
const MODELS = path.resolve(
  process.env.GGWEB_MODELS || path.join(process.env.GGWEB_CACHE || path.join(process.env.HOME || '', '.cache', 'ggweb'), 'models'),
);
const PORT = Number(process.env.PORT || 8080);
const HOST = process.env.HOST || '127.0.0.1';
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.ts': 'text/plain; charset=utf-8',
  '.d.ts': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.gguf': 'application/octet-stream',
  '.gz': 'application/octet-stream',
};

const server = http.createServer((req, res) => {
  const url = new URL(req.url || '/', 'http://localhost');
  let rel = decodeURIComponent(url.pathname);
  if (rel === '/' || rel === '') {
    res.writeHead(302, { Location: '/demo/' });
    res.end();
    return;
  }
  // /vendor/NAME/* from $GGWEB_VENDOR_NAME (a benchmark's anchor, e.g. wllama: www/bench/wllama.mjs).
  const vendor = /^\/vendor\/([a-z0-9-]+)\//.exec(rel);
  const vendorDir = vendor && process.env[`GGWEB_VENDOR_${vendor[1].toUpperCase().replace(/-/g, '_')}`];
  const inModels = rel.startsWith('/models/');
  const base = vendorDir ? path.resolve(vendorDir) : inModels ? MODELS : ROOT;
  const sub = vendorDir ? rel.slice(vendor[0].length - 1) : inModels ? rel.slice('/models'.length) : rel;
  const file = path.join(base, path.normalize(sub).replace(/^([/\\])+/, ''));
  if (!file.startsWith(base)) {
    res.writeHead(403).end('forbidden');
    return;
  }
  let target = file;
  try {
    if (fs.statSync(target).isDirectory()) target = path.join(target, 'index.html');
    const st = fs.statSync(target);
    const ext = target.endsWith('.d.ts') ? '.d.ts' : path.extname(target);
    const isolate = url.searchParams.get('coi') !== '0';
    res.writeHead(200, {
      'Content-Type': TYPES[ext] || 'application/octet-stream',
      'Content-Length': st.size,
      'Cache-Control': 'no-store',
      ...(isolate ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {}),
      'Cross-Origin-Resource-Policy': 'same-origin',
    });
    if (req.method === 'HEAD') return res.end();
    fs.createReadStream(target).pipe(res);
  } catch {
    res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`not found: ${rel}`);
  }
});

server.listen(PORT, HOST, () => {
  console.log(`ggweb demo: http://localhost:${server.address().port}/demo/  (serving ${ROOT})`);
});
export default server;
