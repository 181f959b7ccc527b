// Hostile inputs in headless Chromium (puppeteer-core driving /usr/bin/chromium): the npm
// package in a cross-origin-isolated page against a server that lies. Its own raw-socket server
// serves www/ and the hostile routes from one origin: a 404, Content-Length above and below the
// body, a dropped connection, a stalled download (aborted), a 2 GiB claim and a header claiming
// 1.6 GB. Each must reject with its `code`, the wasm heap must not grow by a claim, and the module
// must still compute afterwards. Exit code 0 on success.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const WWW = path.join(ROOT, 'www');
const CHROME = process.env.CHROME || '/usr/bin/chromium';
const CNN = fs.readFileSync(path.join(ROOT, 'crate/assets/mnist-cnn-f32.gguf'));

const ISOLATION = 'Cross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\nCross-Origin-Resource-Policy: same-origin\r\nCache-Control: no-store\r\n';
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };
const head = (status, len, extra = '') =>
  `HTTP/1.1 ${status}\r\n${len === null ? '' : `Content-Length: ${len}\r\n`}${ISOLATION}${extra}Connection: close\r\n\r\n`;

/** A GGUF header declaring one f32 tensor of `n` elements, none of its data. */
function claimingHeader(n) {
  const parts = [];
  const u32 = (x) => { const b = Buffer.alloc(4); b.writeUInt32LE(x); parts.push(b); };
  const u64 = (x) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(x)); parts.push(b); };
  const str = (s) => { u64(Buffer.byteLength(s)); parts.push(Buffer.from(s)); };
  parts.push(Buffer.from('GGUF'));
  u32(3); u64(1); u64(0);
  str('big'); u32(1); u64(n); u32(0); u64(0);
  const h = Buffer.concat(parts);
  return Buffer.concat([h, Buffer.alloc((32 - (h.length % 32)) % 32)]);
}

const routes = {
  '/hostile/cnn': (s) => { s.write(head('200 OK', CNN.length)); s.end(CNN); },
  '/hostile/short': (s) => { s.write(head('200 OK', CNN.length + 4096)); s.end(CNN); },
  '/hostile/long': (s) => { s.write(head('200 OK', CNN.length - 5000)); s.end(CNN); },
  '/hostile/drop': (s) => { s.write(head('200 OK', CNN.length)); s.write(CNN.subarray(0, 3000), () => s.destroy()); },
  '/hostile/stall': (s) => { s.write(head('200 OK', CNN.length)); s.write(CNN.subarray(0, 3000)); },
  '/hostile/huge-length': (s) => { s.write(head('200 OK', 2 ** 31 - 4096)); s.end(CNN.subarray(0, 4096)); },
  '/hostile/huge-header': (s) => {
    const h = claimingHeader(400_000_000);
    s.write(head('200 OK', null, 'Transfer-Encoding: chunked\r\n'));
    s.end(Buffer.concat([Buffer.from(`${h.length.toString(16)}\r\n`), h, Buffer.from('\r\n0\r\n\r\n')]));
  },
};
const page404 = (s) => s.end(head('404 Not Found', 9) + 'not found');
function serveFile(s, rel) {
  const file = path.join(WWW, path.normalize(rel).replace(/^([/\\])+/, ''));
  if (!file.startsWith(WWW) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) return page404(s);
  const body = fs.readFileSync(file);
  s.write(head('200 OK', body.length, `Content-Type: ${TYPES[path.extname(file)] || 'application/octet-stream'}\r\n`));
  s.end(body);
}
const sockets = new Set();
const server = net.createServer((s) => {
  sockets.add(s);
  s.on('close', () => sockets.delete(s));
  s.on('error', () => {});
  s.once('data', (d) => {
    const rel = decodeURIComponent(d.toString('latin1').split(' ')[1] || '/').split('?')[0];
    if (rel === '/hostile.html') {
      const html = '<!doctype html><meta charset="utf-8"><title>hostile</title>';
      return s.end(head('200 OK', Buffer.byteLength(html), 'Content-Type: text/html\r\n') + html);
    }
    (routes[rel] ?? ((x) => serveFile(x, rel)))(s);
  });
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

const browser = await puppeteer.launch({
  executablePath: CHROME,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
});
let failed = false;
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.log(`[pageerror] ${e.message}`));
  await page.goto(`${base}/hostile.html`);
  const results = await page.evaluate(async () => {
    const m = await import('/dist/index.js');
    await m.init();
    const out = [];
    const expect = async (name, f, codes) => {
      try {
        await f();
        out.push({ name, ok: false, got: 'no error' });
      } catch (e) {
        out.push({ name, ok: codes.includes(e?.code), got: `${e?.code}: ${e?.message}` });
      }
    };
    out.push({ name: 'cross-origin isolated', ok: self.crossOriginIsolated, got: String(self.crossOriginIsolated) });
    await expect('404', () => m.loadGGUF('/hostile/nope.gguf'), ['io']);
    await expect('Content-Length above the body', () => m.loadGGUF('/hostile/short'), ['io', 'bad-gguf']);
    await expect('Content-Length below the file', () => m.loadGGUF('/hostile/long'), ['bad-gguf']);
    await expect('dropped connection', () => m.loadGGUF('/hostile/drop'), ['io', 'bad-gguf']);
    const c = new AbortController();
    setTimeout(() => c.abort(), 300);
    await expect('stalled download, aborted', () => m.loadGGUF('/hostile/stall', { signal: c.signal }), ['aborted']);
    const heap0 = m.wasmMemoryBytes();
    await expect('2 GiB Content-Length', () => m.LLM.load('/hostile/huge-length', { cache: false }), ['io', 'bad-gguf']);
    await expect('header claiming 1.6 GB', () => m.LLM.load('/hostile/huge-header', { cache: false }), ['bad-gguf']);
    const grown = m.wasmMemoryBytes() - heap0;
    out.push({ name: 'heap not grown by claims', ok: grown < 64 << 20, got: `${grown} bytes` });
    const g = new m.Graph();
    await expect('tensor of 2^30 + 1 f32', () => g.tensor('f32', [2 ** 30 + 1]), ['too-large']);
    await expect('view past its source', () => g.view(g.tensor('f32', [64]), [16], [], 2 ** 32 - 64), ['shape', 'too-large']);
    await expect('soft_max mask with a 0 dim', () => g.softMax(g.tensor('f32', [8, 4, 2]), { mask: g.tensor('f32', [8, 4, 0]) }), ['shape']);
    await expect('wrong source type', () => g.add(1, 2), ['invalid-argument']);
    await expect('bytes that are not GGUF', () => m.loadGGUF(new TextEncoder().encode('NOPE not a gguf file at all')), ['bad-gguf']);
    const gg = await m.loadGGUF('/hostile/cnn');
    out.push({ name: 'honest download loads', ok: gg.architecture === 'mnist-cnn', got: String(gg.architecture) });
    const a = g.fromArray([1, -2, 3]);
    const n = g.neg(a);
    await g.compute(n);
    const v = [...(await n.read())];
    out.push({ name: 'still computes', ok: v.join() === '-1,2,-3', got: v.join() });
    return out;
  });
  for (const r of results) {
    console.log(`${r.ok ? 'ok  ' : 'FAIL'} ${r.name} (${r.got})`);
    if (!r.ok) failed = true;
  }
} finally {
  await browser.close();
  for (const s of sockets) s.destroy();
  server.close();
}
process.exit(failed ? 1 : 0);
