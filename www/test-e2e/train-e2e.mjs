// Training in headless Chromium: the demo's train page (www/demo/train.html) trains mnist-fc for
// one epoch on 6,000 training images in its Web Worker (the single-thread CPU build), asserts
// >= 90 % on the 10,000 t10k images and prints the time per epoch; then t10k digits painted on
// the pad are classified by the model just trained, and the page's Stop button ends a second run
// early. Screenshot: test-output/train.png. Then WebGPU (SwiftShader, a CPU emulation) on a
// `?coi=0` page (the single-thread builds, which have WebGPU): a short run in the Worker on
// WebGPU matches the same run on the CPU step by step (loss within 2e-3), every node of the
// training and optimizer graphs runs on WebGPU, and the GGUF it saves is read by `Mnist`; the
// trainer on the page's thread rejects a concurrent call with `busy` and stays usable after
// errors. Exit code 0 on success.
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = path.join(ROOT, 'test-output');
fs.mkdirSync(OUT, { recursive: true });
const CHROME = process.env.CHROME || '/usr/bin/chromium';
// GGWEB_BUILD=simd|scalar picks the worker's wasm build (default: auto, relaxed SIMD in Chromium).
const BUILD = process.env.GGWEB_BUILD || 'auto';

process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;
const images = zlib.gunzipSync(fs.readFileSync(path.join(ROOT, 'crate/assets/t10k-images-idx3-ubyte.gz'))).subarray(16);
const labels = zlib.gunzipSync(fs.readFileSync(path.join(ROOT, 'crate/assets/t10k-labels-idx1-ubyte.gz'))).subarray(8);

const browser = await puppeteer.launch({
  executablePath: CHROME,
  headless: true,
  protocolTimeout: 600_000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage', '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader'],
});
let failed = false;
const check = (cond, msg) => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!cond) failed = true;
};
const logs = [];
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 1300 });
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  await page.goto(`${base}/demo/train.html?n=6000&epochs=1&batch=32&lr=0.002&model=fc&build=${BUILD}&autostart=1`);
  await page.waitForFunction(() => window.__train?.done || window.__train?.error, { timeout: 300_000, polling: 200 });
  const s = await page.evaluate(() => window.__train);
  check(s.error === null, `training ran without error (${s.error})`);
  if (s.error === null) {
    const e = s.epochs[0];
    check(s.epochs.length === 1 && s.steps === Math.floor(5700 / 32), `one epoch of ${s.steps} steps reported step by step`);
    check(s.test.accuracy >= 0.9, `test accuracy ${(s.test.accuracy * 100).toFixed(2)} % >= 90 % after one epoch on 6,000 images`);
    console.log(`# train chromium (${s.info.build} build, worker, 1 thread): mnist-fc 1 epoch on 6,000 images: ${e.seconds.toFixed(2)} s/epoch, ` +
      `validation ${(e.validation.accuracy * 100).toFixed(2)} %, test ${(s.test.accuracy * 100).toFixed(2)} %`);
    check(await page.$eval('#download', (b) => !b.disabled), 'the GGUF can be downloaded');

    // Paint t10k digits onto the pad (white on black, scaled 10×) and read the trained model's answer.
    let right = 0;
    const n = 8;
    for (let i = 0; i < n; i++) {
      const px = Array.from(images.subarray(i * 784, (i + 1) * 784));
      await page.evaluate((px) => {
        window.__train.prediction = null;
        const c = document.getElementById('pad').getContext('2d');
        c.fillStyle = '#000';
        c.fillRect(0, 0, 280, 280);
        for (let j = 0; j < 784; j++) {
          c.fillStyle = `rgb(${px[j]},${px[j]},${px[j]})`;
          c.fillRect((j % 28) * 10, Math.floor(j / 28) * 10, 10, 10);
        }
        document.getElementById('pad').dispatchEvent(new PointerEvent('pointerup'));
      }, px);
      await page.waitForFunction(() => window.__train.prediction, { timeout: 10_000 });
      const p = await page.evaluate(() => window.__train.prediction);
      if (p.label === labels[i]) right++;
    }
    check(right >= n - 2, `the model trained in the page classifies ${right} of ${n} painted t10k digits`);
    await page.screenshot({ path: path.join(OUT, 'train.png'), fullPage: true });

    // Stop: a second run (3 epochs) ends early on the Stop button and still yields a model.
    await page.evaluate(() => { document.getElementById('epochs').value = '3'; document.getElementById('train').click(); });
    await page.waitForFunction(() => window.__train.training && window.__train.steps >= 5, { timeout: 60_000, polling: 50 });
    await page.click('#stop');
    await page.waitForFunction(() => window.__train.done || window.__train.error, { timeout: 120_000, polling: 100 });
    const st = await page.evaluate(() => ({ steps: window.__train.steps, error: window.__train.error, status: document.getElementById('status').textContent }));
    check(st.error === null && st.steps < 3 * 178, `Stop ended the 3-epoch run after ${st.steps} steps (${st.status})`);
  }

  // ---- WebGPU: the same short run on the CPU and on WebGPU, in the Worker ----
  const gp = await browser.newPage();
  gp.on('console', (m) => logs.push(`[gpu ${m.type()}] ${m.text()}`));
  gp.on('pageerror', (e) => logs.push(`[gpu pageerror] ${e.message}`));
  await gp.goto(`${base}/test-e2e/blank.html?coi=0`);
  const g = await gp.evaluate(async () => {
    const { Trainer, LocalTrainer, Mnist, loadMnistSet } = await import('/dist/index.js');
    const bytes = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
    const [imagesIdx, labelsIdx] = await Promise.all([bytes('/demo/assets/train-images-idx3-ubyte.gz'), bytes('/demo/assets/train-labels-idx1-ubyte.gz')]);
    const test = await loadMnistSet('/demo/assets/t10k-images-idx3-ubyte.gz', '/demo/assets/t10k-labels-idx1-ubyte.gz');
    const N_TEST = 1000;
    const testImages = test.images.subarray(0, N_TEST * 784), testLabels = test.labels.subarray(0, N_TEST);
    // 630 images: 599 train in 5 steps of 100 (2 physical batches of 50: the accumulation and
    // optimizer graphs run too), 31 validate.
    const opts = { model: 'fc', epochs: 1, batchSize: 100, physicalBatchSize: 50, lr: 2e-3, seed: 5 };
    const out = { crossOriginIsolated: self.crossOriginIsolated };
    for (const backend of ['cpu', 'webgpu']) {
      const t = await Trainer.create({ ...opts, backend });
      const losses = [];
      const run = t.fit({ imagesIdx: imagesIdx.slice(), labelsIdx: labelsIdx.slice(), limit: 630 }, { onStep: (s) => losses.push(s.loss) });
      // A call while fitting is rejected as busy (not queued into the run).
      const busy = await t.evaluate(testImages, testLabels).then(() => 'resolved', (e) => e.code);
      const r = await run;
      const gguf = await t.toGGUF();
      const score = await t.evaluate(testImages, testLabels);
      const m = await Mnist.load(gguf);
      const logits = await m.logits(testImages);
      let right = 0;
      for (let i = 0; i < N_TEST; i++) {
        const l = logits.subarray(i * 10, i * 10 + 10);
        if (l.indexOf(Math.max(...l)) === testLabels[i]) right++;
      }
      m.free();
      out[backend] = { losses, steps: r.steps, seconds: r.seconds, epoch: r.epochs[0], info: t.info, busy, score, mnistAccuracy: right / N_TEST, ggufBytes: gguf.length };
      await t.dispose();
    }
    // On the page's thread: a second async call while one is in flight is busy (the engine's
    // flag); errors are coded and leave the trainer usable.
    const lt = await LocalTrainer.create({ ...opts, backend: 'webgpu' });
    const first = lt.toGGUFAsync();
    out.localBusy = await lt.toGGUFAsync().then(() => 'resolved', (e) => e.code);
    await first;
    out.localShape = await lt.evaluateAsync(testImages, testLabels.subarray(1)).then(() => 'resolved', (e) => e.code);
    out.localSync = (() => { try { lt.toGGUF(); return 'returned'; } catch (e) { return e.code; } })();
    const lr = await lt.fit({ imagesIdx: imagesIdx.slice(), labelsIdx: labelsIdx.slice(), limit: 630 });
    out.localSteps = lr.steps;
    out.localAfter = (await lt.evaluateAsync(testImages, testLabels)).accuracy;
    out.localBackend = lt.backendInfo.backend;
    lt.dispose();
    const auto = await Trainer.create({ ...opts, backend: 'auto' });
    out.auto = auto.info.backend;
    await auto.dispose();
    return out;
  });
  check(!g.crossOriginIsolated, 'the WebGPU page is not cross-origin isolated (?coi=0)');
  const gi = g.webgpu.info.backend;
  check(gi.backend === 'webgpu' && gi.requested === 'webgpu' && !!gi.adapter?.name, `the worker trains on WebGPU (${gi.adapter?.name}: ${gi.reason})`);
  const pl = gi.placements;
  const gpuNodes = Object.entries(pl?.nodes ?? {}).filter(([k]) => k.startsWith('WebGPU')).reduce((a, [, n]) => a + n, 0);
  const otherNodes = Object.entries(pl?.nodes ?? {}).filter(([k]) => !k.startsWith('WebGPU')).reduce((a, [, n]) => a + n, 0);
  check(gpuNodes > 30 && otherNodes === 0 && pl.elsewhere.length === 0,
    `every node of the training and optimizer graphs runs on WebGPU (${JSON.stringify(pl)})`);
  check(g.cpu.info.backend.backend === 'cpu', 'backend cpu trains on the CPU');
  check(g.auto.backend === 'webgpu' && g.auto.requested === 'auto', `auto picks WebGPU where an adapter exists (${g.auto.reason})`);
  check(g.cpu.steps === 5 && g.webgpu.steps === 5 && g.webgpu.losses.length === 5, `5 steps on each backend (${g.cpu.steps}, ${g.webgpu.steps})`);
  const dl = Math.max(...g.cpu.losses.map((l, i) => Math.abs(l - g.webgpu.losses[i])));
  check(dl <= 2e-3, `per-step losses on WebGPU match the CPU's within 2e-3 (max |diff| ${dl.toExponential(2)}; CPU ${g.cpu.losses.map((l) => l.toFixed(4)).join(' ')})`);
  check(g.cpu.losses[4] < g.cpu.losses[0] && g.webgpu.losses[4] < g.webgpu.losses[0], 'the loss falls over the 5 steps');
  check(Math.abs(g.cpu.epoch.validation.accuracy - g.webgpu.epoch.validation.accuracy) <= 1 / 31 + 1e-9 && g.webgpu.epoch.validation.images === 31,
    `validation (31 images) on WebGPU ${g.webgpu.epoch.validation.accuracy.toFixed(3)} vs CPU ${g.cpu.epoch.validation.accuracy.toFixed(3)}`);
  for (const b of ['cpu', 'webgpu']) check(g[b].busy === 'busy', `${b}: evaluate while fitting rejects with busy (${g[b].busy})`);
  check(g.webgpu.mnistAccuracy === g.webgpu.score.accuracy && Math.abs(g.webgpu.mnistAccuracy - g.cpu.mnistAccuracy) <= 0.01 && g.webgpu.mnistAccuracy >= 0.5,
    `Mnist reads the WebGPU-trained GGUF: ${(g.webgpu.mnistAccuracy * 100).toFixed(1)} % on 1,000 t10k images (trainer.evaluate ${(g.webgpu.score.accuracy * 100).toFixed(1)} %, CPU-trained ${(g.cpu.mnistAccuracy * 100).toFixed(1)} %)`);
  check(g.localBusy === 'busy' && g.localShape === 'shape' && g.localSync === 'unsupported' && g.localSteps === 5 && g.localAfter >= 0.5 && g.localBackend === 'webgpu',
    `LocalTrainer on WebGPU: concurrent call ${g.localBusy}, bad labels ${g.localShape}, sync toGGUF ${g.localSync}, then ${g.localSteps} steps (${(g.localAfter * 100).toFixed(1)} %)`);
  const ips = (b) => (5 * 100) / g[b].seconds;
  console.log(`# train chromium worker, mnist-fc, 5 steps of 100 (2 x 50) on 599 images: CPU (${g.cpu.info.build} build, 1 thread) ${Math.round(ips('cpu'))} images/s, ` +
    `WebGPU (${gi.adapter?.name}, ${gi.f16 ? 'f16' : 'f32'} path) ${Math.round(ips('webgpu'))} images/s (validation included)`);
} catch (e) {
  check(false, `exception: ${e.stack || e}`);
} finally {
  await browser.close();
  server.close();
}
if (failed) {
  console.log(logs.slice(-30).join('\n'));
  process.exit(1);
}
console.log('train e2e: all passed');
