// Training in headless Chromium: the demo's train page (www/demo/train.html) trains mnist-fc for
// one epoch on 6,000 training images in its Web Worker (the single-thread CPU build), asserts
// >= 90 % on the 10,000 t10k images and prints the time per epoch; then t10k digits painted on
// the pad are classified by the model just trained, and the page's Stop button ends a second run
// early. Screenshot: test-output/train.png. Exit code 0 on success.
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
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
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
