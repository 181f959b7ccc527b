// The MNIST fc model's first batch on a fresh page, with and without the load-time warm-up
// (issue 15: V8 runs wasm in its baseline tier first). A benchmark, not a test:
//   node www/bench/warmup.mjs [ROUNDS]
// Prints, per fresh page: load ms, the first and the second 500-image batch in ms.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const rounds = Number(process.argv[2] ?? 2);
process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROME || '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
});
try {
  for (let r = 0; r < rounds; r++) {
    for (const warmUp of [false, true]) {
      for (const coi of ['0', '1']) {
        const page = await browser.newPage();
        await page.goto(`${base}/demo/index.html?coi=${coi}`);
        const out = await page.evaluate(async (warmUp) => {
          const g = await import('/dist/index.js');
          const info = await g.init();
          const t0 = performance.now();
          const m = await g.Mnist.load('/demo/assets/mnist-fc-f32.gguf', { warmUp });
          const t1 = performance.now();
          const x = new Float32Array(500 * 784).fill(0.5);
          await m.logits(x);
          const t2 = performance.now();
          await m.logits(x);
          const t3 = performance.now();
          return { build: info.build, load: t1 - t0, first: t2 - t1, second: t3 - t2 };
        }, warmUp);
        console.log(JSON.stringify({ round: r, warmUp, ...out, load: +out.load.toFixed(1), first: +out.first.toFixed(1), second: +out.second.toFixed(1) }));
        await page.close();
      }
    }
  }
} finally {
  await browser.close();
  server.close();
}
