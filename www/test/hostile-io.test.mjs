// Hostile downloads and calls (the hostile-inputs issue, item 4): a 404, a server that lies about
// Content-Length either way, a connection dropped mid-body, a stalled download aborted, a header
// claiming gigabytes, wrong argument types, concurrent calls. Each is a rejected Promise (or a
// throw) with a `code`, nothing is allocated from a claim, and the module stays usable afterwards.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import fs from 'node:fs';
import { init, Graph, loadGGUF, LLM, wasmMemoryBytes } from '../dist/index.js';
import { asset, initOptions, SMOLLM2 } from './helpers.mjs';

await init(initOptions);

const CNN = fs.readFileSync(asset('mnist-cnn-f32.gguf'));
const code = (c, re) => (e) => {
  assert.equal(e?.code, c, `code of: ${e?.message}`);
  if (re) assert.match(e.message, re);
  return true;
};

/** A GGUF whose header declares one f32 tensor of `n` elements and holds none of its data. */
function claimingHeader(n) {
  const enc = new TextEncoder();
  const parts = [];
  const u32 = (x) => { const b = Buffer.alloc(4); b.writeUInt32LE(x); parts.push(b); };
  const u64 = (x) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(x)); parts.push(b); };
  const str = (s) => { const b = enc.encode(s); u64(b.length); parts.push(Buffer.from(b)); };
  parts.push(Buffer.from('GGUF'));
  u32(3); u64(1); u64(0); // version, 1 tensor, 0 metadata
  str('big'); u32(1); u64(n); u32(0); u64(0); // name, 1 dim, ne0, F32, offset 0
  const h = Buffer.concat(parts);
  return Buffer.concat([h, Buffer.alloc((32 - (h.length % 32)) % 32)]);
}

// Raw HTTP so the server can lie: each route writes its own status line, headers and body.
const routes = {
  '/404': (s) => s.end('HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found'),
  '/cnn': (s) => { s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${CNN.length}\r\nConnection: close\r\n\r\n`); s.end(CNN); },
  // Claims more than it sends, then closes.
  '/short': (s) => { s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${CNN.length + 4096}\r\nConnection: close\r\n\r\n`); s.end(CNN); },
  // Claims less than the file: the client reads only that much, a truncated GGUF.
  '/long': (s) => { s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${CNN.length - 5000}\r\nConnection: close\r\n\r\n`); s.end(CNN); },
  // Drops the connection in the middle of the body.
  '/drop': (s) => { s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${CNN.length}\r\n\r\n`); s.write(CNN.subarray(0, 3000), () => s.destroy()); },
  // Sends the start, then stalls forever.
  '/stall': (s) => { s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${CNN.length}\r\n\r\n`); s.write(CNN.subarray(0, 3000)); },
  // 2 GiB announced, a few bytes sent.
  '/huge-length': (s) => { s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${2 ** 31 - 4096}\r\nConnection: close\r\n\r\n`); s.end(CNN.subarray(0, 4096)); },
  // No length (chunked), a header claiming a 1.6 GB tensor, then the end.
  '/huge-header': (s) => {
    const h = claimingHeader(400_000_000);
    s.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n');
    s.end(`${h.length.toString(16)}\r\n${h.toString('latin1')}\r\n0\r\n\r\n`, 'latin1');
  },
};
let server;
let base;
const open = new Set();
before(async () => {
  server = net.createServer((s) => {
    open.add(s);
    s.on('close', () => open.delete(s));
    s.on('error', () => {});
    s.once('data', (d) => {
      const path = d.toString('latin1').split(' ')[1];
      (routes[path] ?? routes['/404'])(s);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${server.address().port}`;
});
after(() => {
  for (const s of open) s.destroy();
  server.close();
});

test('a 404 is an io error with its status', async () => {
  await assert.rejects(loadGGUF(`${base}/404`), (e) => code('io', /HTTP 404/)(e) && e.status === 404);
  await assert.rejects(LLM.load(`${base}/404`, { cache: false }), code('io', /HTTP 404/));
});

test('a server that lies about Content-Length is an error either way', async () => {
  // More announced than sent: the body ends early (io) or the file is short (bad-gguf).
  await assert.rejects(loadGGUF(`${base}/short`), (e) => ['io', 'bad-gguf'].includes(e.code));
  // Less announced than the file: a truncated GGUF.
  await assert.rejects(loadGGUF(`${base}/long`), code('bad-gguf'));
  // A dropped connection.
  await assert.rejects(loadGGUF(`${base}/drop`), (e) => ['io', 'bad-gguf'].includes(e.code));
  // The honest route still loads.
  const g = await loadGGUF(`${base}/cnn`);
  assert.equal(g.architecture, 'mnist-cnn');
});

test('a stalled download is aborted by its signal', async () => {
  const c = new AbortController();
  const t = setTimeout(() => c.abort(), 300);
  await assert.rejects(loadGGUF(`${base}/stall`, { signal: c.signal }), code('aborted'));
  clearTimeout(t);
});

test('claimed sizes allocate nothing until the bytes arrive', async () => {
  const before = wasmMemoryBytes();
  // 2 GiB announced: the model stream used to grow the heap to that at once.
  await assert.rejects(LLM.load(`${base}/huge-length`, { cache: false }), (e) => ['io', 'bad-gguf'].includes(e.code));
  // A header claiming 1.6 GB with no length.
  await assert.rejects(LLM.load(`${base}/huge-header`, { cache: false }), code('bad-gguf'));
  await assert.rejects(loadGGUF(`${base}/huge-header`), code('bad-gguf'));
  const grown = wasmMemoryBytes() - before;
  assert.ok(grown < 64 << 20, `wasm heap grew by ${grown} bytes`);
});

test('wrong types and ids to the Graph API are coded errors; the graph stays usable', () => {
  const g = new Graph();
  assert.throws(() => g.tensor('f33', [2]), code('invalid-argument', /unknown tensor type/));
  assert.throws(() => g.tensor('f32', 'abc'), code('shape'));
  assert.throws(() => g.tensor('f32', [1.5]), code('shape'));
  assert.throws(() => g.tensor('f32', [-1]), code('shape'));
  assert.throws(() => g.add(1, 2), code('invalid-argument'));
  const other = new Graph();
  assert.throws(() => g.add(g.fromArray([1]), other.fromArray([1])), code('invalid-argument'));
  assert.throws(() => g.mulMat(g.tensor('f32', [3, 2]), g.tensor('f32', [4, 2])), code('shape'));
  const a = g.fromArray([1, 2]);
  const s = g.add(a, a);
  g.computeSync(s);
  assert.deepEqual([...s.readSync()], [2, 4]);
  other.free();
  assert.throws(() => other.fromArray([1]), code('invalid-argument', /freed/));
});

test('a second generation while one runs is busy; the model keeps working', { skip: !fs.existsSync(SMOLLM2) && 'no SmolLM2 (scripts/fetch-models.sh)' }, async () => {
  const llm = await LLM.load(SMOLLM2);
  const first = llm.complete('Hello', { maxTokens: 4, temperature: 0 });
  await assert.rejects(llm.complete('Hi', { maxTokens: 2 }), code('busy'));
  assert.throws(() => llm.tokenizeSync(42), (e) => typeof e.code === 'string');
  const r = await first;
  assert.ok(r.tokens.length > 0);
  const again = await llm.complete('Hello', { maxTokens: 4, temperature: 0 });
  assert.deepEqual(again.tokens, r.tokens);
  llm.free();
});
