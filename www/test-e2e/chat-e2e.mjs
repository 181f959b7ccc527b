// The chat page's model loading in headless Chromium (puppeteer-core driving /usr/bin/chromium):
// a local file through the file input (family, quantization, parameters shown; the model's own
// chat template; a short reply), and an unsupported GGUF (SmolLM2 with general.architecture
// rewritten to "mamba") refused with the reason before its weights are read — from a file, and
// from a URL whose server counts the bytes it sends (the page cancels the body after the header).
// Screenshots test-output/chat-file.png, chat-refused.png. Exit code 0 on success. ~30 s.
// Env: CHAT_E2E_QUERY is appended to the page URLs (e.g. `&coi=0`: no cross-origin isolation).
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { SMOLLM2 } from '../test/helpers.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = path.join(ROOT, 'test-output');
fs.mkdirSync(OUT, { recursive: true });
const CHROME = process.env.CHROME || '/usr/bin/chromium';
// Appended to the page URLs: e.g. `&coi=0` where only the single-thread builds are built.
const QUERY = process.env.CHAT_E2E_QUERY || '';

let failed = false;
const check = (cond, msg) => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!cond) failed = true;
};

/** SmolLM2's bytes with general.architecture "llama" rewritten in place to `arch` (5 letters). */
function withArchitecture(bytes, arch) {
  const b = Buffer.from(bytes);
  const at = b.indexOf('general.architecture') + 'general.architecture'.length;
  if (b.readUInt32LE(at) !== 8 || Number(b.readBigUInt64LE(at + 4)) !== arch.length) throw new Error('unexpected GGUF layout');
  b.write(arch, at + 12, 'latin1');
  return b;
}

const mamba = withArchitecture(fs.readFileSync(SMOLLM2), 'mamba');
const mambaFile = path.join(os.tmpdir(), `ggweb-chat-e2e-mamba-${process.pid}.gguf`);
fs.writeFileSync(mambaFile, mamba);

// A second origin serving the rewritten file slowly (256 KiB every 10 ms), counting what it sent.
const served = { requests: 0, bytes: 0, done: null };
const counting = http.createServer(async (req, res) => {
  res.writeHead(200, {
    'Content-Type': 'application/octet-stream',
    'Content-Length': mamba.length,
    'Access-Control-Allow-Origin': '*',
    'Cross-Origin-Resource-Policy': 'cross-origin',
    'Cache-Control': 'no-store',
  });
  if (req.method === 'HEAD') return res.end();
  served.requests++;
  let closed = false;
  const closing = new Promise((r) => res.once('close', r)).then(() => (closed = true));
  for (let off = 0; off < mamba.length && !closed; off += 256 << 10) {
    const chunk = mamba.subarray(off, off + (256 << 10));
    if (!res.write(chunk)) await Promise.race([new Promise((r) => res.once('drain', r)), closing]);
    if (!closed) served.bytes += chunk.length;
    await new Promise((r) => setTimeout(r, 10));
  }
  res.end();
});
await new Promise((r) => counting.listen(0, '127.0.0.1', r));

process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;

const logs = [];
const browser = await puppeteer.launch({
  executablePath: CHROME,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  const settled = () => page.waitForFunction(() => window.__chat?.ready || window.__chat?.error || window.__chat?.refused, { timeout: 120000 });

  // ---- a local file ----
  await page.goto(`${base}/demo/chat.html?autoload=0&maxTokens=8${QUERY}`);
  await page.waitForFunction(() => window.__chat?.pageReady);
  await (await page.$('#file')).uploadFile(SMOLLM2);
  await settled();
  let st = await page.evaluate(() => ({ ...window.__chat, model: document.getElementById('model').textContent }));
  check(st.ready && !st.error, `file: loaded ${st.error ?? ''}`);
  check(st.inspection?.architecture === 'llama' && st.inspection?.quant === 'q4_1' && st.inspection?.fileType === 'Q4_1',
    `file: header says ${st.inspection?.architecture} ${st.inspection?.fileType} (${st.inspection?.quant})`);
  check(/llama/.test(st.model) && /Q4_1/.test(st.model) && /M parameters/.test(st.model) && /MiB/.test(st.model), `file: page shows "${st.model}"`);
  check(st.info?.chatFormat === 'jinja', `file: chat format ${st.info?.chatFormat}`);
  await page.type('#prompt', 'Hi!');
  await page.click('#send');
  await page.waitForFunction(() => window.__chat.replies.length >= 1, { timeout: 60000 });
  st = await page.evaluate(() => window.__chat);
  check(st.replies[0].length > 0 && !st.error, `file: reply "${st.replies[0]}"`);
  await page.screenshot({ path: path.join(OUT, 'chat-file.png') });

  // ---- an unsupported family from a file: refused from the header ----
  await (await page.$('#file')).uploadFile(mambaFile);
  await settled();
  st = await page.evaluate(() => ({ ...window.__chat, model: document.getElementById('model').textContent }));
  check(st.refused?.includes("unsupported architecture 'mamba'") && !st.ready && st.loadInfo === null,
    `file: refused "${st.refused}"`);
  check(st.inspection?.bytesRead < mamba.length / 4, `file: ${st.inspection?.bytesRead} of ${mamba.length} bytes read`);
  check(/refused/.test(st.model), 'file: the page says so');

  // ---- an unsupported family from a URL: the body is cancelled after the header ----
  const url = `http://127.0.0.1:${counting.address().port}/mamba.gguf`;
  await page.goto(`${base}/demo/chat.html?model=${encodeURIComponent(url)}${QUERY}`);
  await settled();
  st = await page.evaluate(() => ({ ...window.__chat, model: document.getElementById('model').textContent }));
  check(st.refused?.includes("unsupported architecture 'mamba' (supported: llama, gemma3, qwen2, qwen3, phi3)"), `url: refused "${st.refused}"`);
  await page.screenshot({ path: path.join(OUT, 'chat-refused.png') });
  // Let the server notice the cancelled body.
  await new Promise((r) => setTimeout(r, 500));
  check(served.requests === 1, `url: ${served.requests} request(s) (no weights download after the header)`);
  check(served.bytes < mamba.length / 4, `url: the server sent ${(served.bytes / 2 ** 20).toFixed(1)} MiB of ${(mamba.length / 2 ** 20).toFixed(1)} MiB; the page read ${(st.inspection?.bytesRead / 2 ** 20).toFixed(1)} MiB`);
  if (failed) console.log(logs.join('\n'));
} catch (e) {
  failed = true;
  console.log(`FAIL ${e.stack}`);
  console.log(logs.join('\n'));
  console.log((await Promise.all((await browser.pages()).map((p) => p.evaluate(() => JSON.stringify(window.__chat)).catch(() => '')))).join('\n'));
} finally {
  await browser.close();
  server.close();
  counting.close();
  fs.rmSync(mambaFile, { force: true });
}
process.exit(failed ? 1 : 0);
