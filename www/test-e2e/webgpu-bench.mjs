// WebGPU in headless Chromium beside the CPU (wasm SIMD128, one thread) in the same page:
// mul_mat GFLOP/s per weight type and shape, and MNIST images/s. Chromium's WebGPU adapter here
// is SwiftShader, a CPU emulation of a GPU: the figures show the path's cost, not a GPU's speed.
// Usage (after scripts/build-web.sh): node www/test-e2e/webgpu-bench.mjs [seconds per point]
// Prints a JSON report; writes test-output/webgpu-bench.json.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const seconds = Number(process.argv[2] ?? 1);
process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROME || '/usr/bin/chromium',
  headless: true,
  protocolTimeout: 1_800_000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage', '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader'],
});
try {
  const page = await browser.newPage();
  await page.goto(`${base}/demo/index.html`);
  const report = await page.evaluate(async (seconds) => {
    const g = await import('/dist/index.js');
    const { device } = await g.webgpuDevice();
    const out = { adapter: device && { name: device.name, f16: device.f16 }, matmul: [], mnist: [] };
    const shapes = [[4096, 1, 4096], [1024, 64, 1024], [1024, 512, 1024]];
    for (const [m, n, k] of shapes) {
      for (const type of ['f32', 'f16', 'q4_0', 'q8_0', 'q4_K']) {
        const row = { type, m, n, k };
        for (const backend of ['cpu', 'webgpu']) {
          try {
            row[backend] = +(await g.benchMulMat({ backend, type, m, n, k, seconds })).gflops.toFixed(3);
          } catch (e) {
            row[backend] = String(e.message || e);
          }
        }
        out.matmul.push(row);
      }
    }
    const set = await g.loadMnistSet('/demo/assets/t10k-images-idx3-ubyte.gz', '/demo/assets/t10k-labels-idx1-ubyte.gz');
    const N = 2000;
    for (const kind of ['fc', 'cnn']) {
      for (const backend of ['cpu', 'webgpu']) {
        const model = await g.Mnist.load(`/demo/assets/mnist-${kind}-f32.gguf`, { backend });
        await model.logits(set.images.subarray(0, 784 * 500)); // warm-up (pipelines, allocation)
        const r = await model.evaluate(set.images.subarray(0, N * 784), set.labels.subarray(0, N));
        out.mnist.push({ kind, backend, images: N, imagesPerSecond: Math.round(r.imagesPerSecond), accuracy: r.accuracy });
        model.free();
      }
    }
    return out;
  }, seconds);
  fs.mkdirSync(path.join(ROOT, 'test-output'), { recursive: true });
  fs.writeFileSync(path.join(ROOT, 'test-output', 'webgpu-bench.json'), JSON.stringify(report, null, 2));
  console.log(JSON.stringify(report, null, 1));
} finally {
  await browser.close();
  server.close();
}
