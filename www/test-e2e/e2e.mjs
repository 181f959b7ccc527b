// Browser end-to-end test of the demo: puppeteer-core drives Debian's /usr/bin/chromium (never a
// downloaded browser). Paints real t10k digits onto the MNIST canvas with mouse events, checks the
// live predictions, runs the test-set evaluation in the Web Worker (SIMD and scalar builds, fc and
// cnn: accuracy and images/s) on the CPU and on WebGPU (SwiftShader: a CPU emulation of a GPU,
// f32 path), measures mul_mat on both, loads GGUFs in the inspector and runs the semantic-search
// page (all-MiniLM-L6-v2 embeddings) when its model is fetched. Screenshots and
// e2e-results.json go to test-output/. Exit code 0 on success.
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { MODELS } from '../test/helpers.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = path.join(ROOT, 'test-output');
fs.mkdirSync(OUT, { recursive: true });
const CHROME = process.env.CHROME || '/usr/bin/chromium';
const QUICK = !!process.env.E2E_QUICK; // skip the scalar evaluations

process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;

const images = zlib.gunzipSync(fs.readFileSync(path.join(ROOT, 'crate/assets/t10k-images-idx3-ubyte.gz'))).subarray(16);
const labels = zlib.gunzipSync(fs.readFileSync(path.join(ROOT, 'crate/assets/t10k-labels-idx1-ubyte.gz'))).subarray(8);

const browser = await puppeteer.launch({
  executablePath: CHROME,
  headless: true,
  // The CNN on SwiftShader (a CPU emulation of a GPU) takes minutes for the 10,000 images.
  protocolTimeout: 1_200_000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage', '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader'],
});
const results = { digits: [], evaluations: [], matmul: [] };
let failed = false;
const check = (cond, msg) => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!cond) failed = true;
};

try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 1000 });
  const logs = [];
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));

  // ---- MNIST: draw digits ----
  // Not cross-origin isolated (?coi=0): the single-thread builds, which have WebGPU (the threads
  // build, on isolated pages, does not; www/test-e2e/threads-e2e.mjs tests it).
  await page.goto(`${base}/demo/mnist.html?coi=0`);
  await page.waitForFunction(() => window.__mnist?.ready || window.__mnist?.error, { timeout: 60000 });
  const err = await page.evaluate(() => window.__mnist.error);
  assert.equal(err, null, `models failed to load: ${err}`);
  check(await page.evaluate(() => !self.crossOriginIsolated), 'page is not cross-origin isolated (?coi=0: no COOP/COEP)');
  // The demo defaults to backend 'auto': WebGPU on Chromium's SwiftShader adapter (f32 path).
  const bi = await page.evaluate(() => window.__mnist.backendInfo);
  results.backendInfo = bi;
  check(bi?.backend === 'webgpu' && bi.requested === 'auto' && bi.adapter?.name && bi.f16 === bi.adapter.shaderF16 &&
    Array.isArray(bi.adapter.features) && bi.adapter.maxStorageBufferBindingSize > 0,
    `auto picks WebGPU: ${bi?.adapter?.name} (${bi?.f16 ? 'f16' : 'f32'} path, features ${bi?.adapter?.features?.join(' ')}) — ${bi?.reason}`);
  const box = await (await page.$('#pad')).boundingBox();

  async function paint(idx) {
    await page.click('#clear');
    const img = images.subarray(idx * 784, idx * 784 + 784);
    const s = box.width / 28;
    for (let y = 0; y < 28; y++) {
      let x = 0;
      while (x < 28) {
        if (img[y * 28 + x] < 100) { x++; continue; }
        const x0 = x;
        while (x < 28 && img[y * 28 + x] >= 100) x++;
        const px = (c) => box.x + (c + 0.5) * s, py = box.y + (y + 0.5) * s;
        await page.mouse.move(px(x0), py);
        await page.mouse.down();
        await page.mouse.move(px(x - 1), py, { steps: 2 });
        await page.mouse.up();
      }
    }
    // The prediction of the finished drawing (WebGPU predictions are async).
    await page.waitForFunction(() => window.__mnist.prediction?.version === window.__mnist.drawn, { timeout: 30000 });
    return page.evaluate(() => window.__mnist.prediction);
  }

  for (const kind of ['fc', 'cnn']) {
    await page.click(`label:has(input[value=${kind}])`);
    let correct = 0;
    const N = 10;
    for (let i = 0; i < N; i++) {
      const p = await paint(i);
      const ok = p.label === labels[i] && p.kind === kind;
      correct += ok;
      results.digits.push({ kind, index: i, label: labels[i], predicted: p.label, p: p.probabilities[p.label] });
      if (i < 3) await page.screenshot({ path: path.join(OUT, `mnist-${kind}-digit${i}.png`) });
    }
    check(correct >= 8, `${kind}: ${correct}/${N} painted t10k digits classified correctly`);
  }

  const shownInfo = await page.$eval('#backendInfo', (e) => e.textContent);
  check(/WebGPU/.test(shownInfo) && /every op on WebGPU/.test(shownInfo), `backend line after drawing: ${shownInfo}`);

  // ---- MNIST: test-set evaluation in the worker ----
  async function setBackend(backend) {
    if ((await page.$eval('#backend', (e) => e.value)) === backend) return;
    await page.evaluate(() => (window.__mnist.ready = false));
    await page.select('#backend', backend);
    await page.waitForFunction(() => window.__mnist.ready || window.__mnist.error, { timeout: 60000 });
  }
  async function evaluate(kind, build, backend = 'cpu') {
    await setBackend(backend);
    await page.click(`label:has(input[value=${kind}])`);
    await page.select('#build', build);
    await page.click('#evaluate');
    await page.waitForFunction(() => window.__mnist.evaluation !== null, { timeout: 1_200_000, polling: 1000 });
    const r = await page.evaluate(() => window.__mnist.evaluation);
    await page.screenshot({ path: path.join(OUT, `mnist-evaluate-${kind}-${build}.png`) });
    return r;
  }
  const want = { fc: 0.9805, cnn: 0.9812 };
  for (const build of QUICK ? ['auto'] : ['simd', 'scalar']) {
    for (const kind of ['fc', 'cnn']) {
      const r = await evaluate(kind, build);
      results.evaluations.push(r);
      check(!r.error && Math.abs(r.accuracy - want[kind]) < 1e-9 && r.total === 10000,
        `evaluate ${kind} (${r.engine ?? build}): ${r.error ?? `${(r.accuracy * 100).toFixed(2)}%, ${Math.round(r.imagesPerSecond)} images/s`}`);
    }
  }
  // The same on WebGPU in the worker: accuracy identical to the CPU's. The CNN runs at ~20-30
  // images/s on SwiftShader (a CPU emulation), so by default it is checked on the first 2,000
  // images against the CPU, prediction by prediction; E2E_WEBGPU_FULL=1 evaluates all 10,000.
  const full = !!process.env.E2E_WEBGPU_FULL;
  for (const kind of full ? ['fc', 'cnn'] : ['fc']) {
    const r = await evaluate(kind, 'simd', 'webgpu');
    results.evaluations.push(r);
    check(!r.error && /WebGPU/.test(r.engine) && Math.abs(r.accuracy - want[kind]) < 1e-9 && r.total === 10000,
      `evaluate ${kind} (${r.engine ?? 'webgpu'}): ${r.error ?? `${(r.accuracy * 100).toFixed(2)}%, ${Math.round(r.imagesPerSecond)} images/s`}`);
  }
  if (!full) {
    const r = await page.evaluate(async () => {
      const g = await import('/dist/index.js');
      const set = await g.loadMnistSet('assets/t10k-images-idx3-ubyte.gz', 'assets/t10k-labels-idx1-ubyte.gz');
      const N = 2000;
      const x = set.images.subarray(0, N * 784);
      const out = {};
      for (const backend of ['cpu', 'webgpu']) {
        const m = await g.Mnist.load('assets/mnist-cnn-f32.gguf', { backend });
        const t0 = performance.now();
        const logits = await m.logits(x);
        out[backend] = { seconds: (performance.now() - t0) / 1000, pred: Array.from({ length: N }, (_, i) => g.argmax(logits.subarray(i * 10, i * 10 + 10))) };
        m.free();
      }
      const same = out.cpu.pred.every((p, i) => p === out.webgpu.pred[i]);
      const correct = out.webgpu.pred.filter((p, i) => p === set.labels[i]).length;
      return { same, correct, N, ips: N / out.webgpu.seconds };
    });
    results.evaluations.push({ kind: 'cnn', engine: 'WebGPU, first 2,000 images', ...r });
    check(r.same, `cnn on WebGPU, first ${r.N} images: predictions identical to the CPU's (${r.correct} correct), ${Math.round(r.ips)} images/s`);
  }

  // ---- mul_mat: CPU (wasm, 1 thread) beside WebGPU (SwiftShader) in the same page ----
  // (a smoke test of benchMulMat; the table comes from www/test-e2e/webgpu-bench.mjs)
  const shapes = [['f32', 256, 8, 256], ['q4_0', 256, 8, 256]];
  const mm = await page.evaluate(async (shapes, seconds) => {
    const { benchMulMat } = await import('/dist/index.js');
    const out = [];
    for (const [type, m, n, k] of shapes) {
      for (const backend of ['cpu', 'webgpu']) {
        try {
          const r = await benchMulMat({ backend, type, m, n, k, seconds });
          out.push({ backend, type, m, n, k, gflops: r.gflops, runs: r.runs });
        } catch (e) {
          out.push({ backend, type, m, n, k, error: String(e.message || e) });
        }
      }
    }
    return out;
  }, shapes, 0.05);
  results.matmul = mm;
  for (const r of mm) {
    console.log(`     mul_mat ${r.type} m=${r.m} n=${r.n} k=${r.k} ${r.backend}: ${r.error ?? `${r.gflops.toFixed(3)} GFLOP/s (${r.runs} runs)`}`);
  }
  check(mm.every((r) => !r.error && r.gflops > 0), 'mul_mat benchmark ran on the CPU and on WebGPU');

  // ---- GGUF inspector ----
  await page.goto(`${base}/demo/inspector.html`);
  await page.click('#open');
  await page.waitForFunction(() => window.__inspector.header || window.__inspector.error, { timeout: 30000 });
  let h = await page.evaluate(() => ({ n: window.__inspector.header?.tensors.length, arch: window.__inspector.header?.architecture, err: window.__inspector.error }));
  check(h.n === 6 && h.arch === 'mnist-cnn', `inspector (URL): ${h.arch}, ${h.n} tensors ${h.err ?? ''}`);
  const input = await page.$('#file');
  await input.uploadFile(path.join(ROOT, 'crate/assets/mnist-fc-f32.gguf'));
  await page.waitForFunction(() => window.__inspector.header?.architecture === 'mnist-fc' || window.__inspector.error, { timeout: 30000 });
  h = await page.evaluate(() => ({ n: window.__inspector.header?.tensors.length, read: window.__inspector.bytesRead, size: window.__inspector.header?.fileSize }));
  check(h.n === 4 && h.read < h.size, `inspector (file): 4 tensors from ${h.read} of ${h.size} bytes`);
  await page.type('#filter', 'fc1');
  const visible = await page.evaluate(() => window.__inspector.visibleTensors);
  check(visible.length === 2 && visible.every((n) => n.startsWith('fc1')), `inspector filter: ${visible.join(', ')}`);
  await page.click('th[data-k=byteSize]');
  await page.click('th[data-k=byteSize]');
  const sorted = await page.evaluate(() => window.__inspector.visibleTensors);
  check(sorted[0] === 'fc1.weight', `inspector sort by size (desc): ${sorted.join(', ')}`);
  await page.screenshot({ path: path.join(OUT, 'inspector.png'), fullPage: true });
  // A malformed file shows the Rust error.
  const bad = path.join(OUT, 'bad.gguf');
  fs.writeFileSync(bad, 'GGUF\x63\x00\x00\x00garbage');
  await input.uploadFile(bad);
  await page.waitForFunction(() => window.__inspector.error, { timeout: 30000 });
  const msg = await page.evaluate(() => window.__inspector.error);
  check(/GGUF/i.test(msg), `inspector error: ${msg}`);

  // ---- semantic search (all-MiniLM-L6-v2 from scripts/fetch-models.sh, served at /models/) ----
  if (fs.existsSync(path.join(MODELS, 'all-MiniLM-L6-v2.f16.gguf'))) {
    // Not isolated (?coi=0): the single-thread builds, which have WebGPU (the threads build does not).
    await page.goto(`${base}/demo/search.html?autoload&coi=0`);
    await page.waitForFunction(() => window.__search.results || window.__search.error, { timeout: 120000 });
    const r = await page.evaluate(() => window.__search);
    const top = r.results?.[0]?.text ?? '';
    check(!r.error && /horse/.test(top) && r.results.length === 10, `search: "${top}" ranks first ${r.error ?? ''}`);
    const w = await page.evaluate(async () => {
      const { Embedder, cosineSimilarity } = await import('../dist/index.js');
      const m = await Embedder.loadInWorker('/models/all-MiniLM-L6-v2.f16.gguf');
      const [a, b] = await m.embed(['A man is eating food.', 'A man is eating a piece of bread.']);
      const code = await m.embed(['word '.repeat(600)]).then(() => null, (e) => e.code);
      await m.dispose();
      return { sim: cosineSimilarity(a, b), n: a.length, code };
    });
    check(Math.abs(w.sim - 0.755) < 0.005 && w.n === 384 && w.code === 'invalid-argument',
      `embeddings in a worker: food/bread similarity ${w.sim.toFixed(4)}, too long a text rejects with ${w.code}`);
    // WebGPU (SwiftShader here) against the CPU build on the same texts.
    const g = await page.evaluate(async () => {
      const { Embedder, cosineSimilarity } = await import('../dist/index.js');
      const t = ['A man is eating food.', 'A man is eating a piece of bread.'];
      const cpu = await Embedder.load('/models/all-MiniLM-L6-v2.f16.gguf');
      const gpu = await Embedder.load('/models/all-MiniLM-L6-v2.f16.gguf', { backend: 'webgpu' });
      const [a, b] = [await cpu.embed(t), await gpu.embed(t)];
      const r = { report: gpu.info.backendReport, agree: Math.min(...a.map((v, i) => cosineSimilarity(v, b[i]))) };
      cpu.dispose();
      gpu.dispose();
      return r;
    });
    check(/WebGPU/.test(g.report) && g.agree >= 0.999, `embeddings on WebGPU vs CPU: cosine ${g.agree.toFixed(6)} (${g.report})`);
    await page.screenshot({ path: path.join(OUT, 'search.png'), fullPage: true });
  } else {
    console.log('search page skipped: all-MiniLM-L6-v2.f16.gguf missing (scripts/fetch-models.sh)');
  }

  // ---- home page ----
  await page.goto(`${base}/demo/`);
  await page.waitForFunction(() => document.getElementById('engine').textContent.includes('ggweb'), { timeout: 30000 });
  await page.screenshot({ path: path.join(OUT, 'index.png') });
  if (logs.some((l) => l.startsWith('[pageerror]') || l.startsWith('[error]'))) {
    console.log(logs.join('\n'));
  }
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  fs.writeFileSync(path.join(OUT, 'e2e-results.json'), JSON.stringify(results, null, 2));
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);
