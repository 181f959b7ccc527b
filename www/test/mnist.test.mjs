import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { init, Mnist, loadMnistSet, preprocessDigit, webgpuDevice } from '../dist/index.js';
import { asset, GOLDEN, initOptions } from './helpers.mjs';

const engine = await init(initOptions);
const golden = JSON.parse(fs.readFileSync(GOLDEN, 'utf8'));
const set = await loadMnistSet(asset('t10k-images-idx3-ubyte.gz'), asset('t10k-labels-idx1-ubyte.gz'));
const EXPECTED = { fc: 0.9805, cnn: 0.9812 };

test('t10k set loads', () => {
  assert.equal(set.count, 10000);
  assert.equal(set.images.length, 10000 * 784);
  assert.deepEqual(Array.from(set.labels.subarray(0, 16)), golden.labels);
});

for (const kind of ['fc', 'cnn']) {
  test(`mnist-${kind}: golden logits of images 0..15 within 1e-4 (${engine.simd ? 'simd' : 'scalar'})`, async () => {
    const model = await Mnist.load(asset(`mnist-${kind}-f32.gguf`));
    assert.equal(model.kind, kind);
    const logits = await model.logits(set.images.subarray(0, 16 * 784));
    const want = golden[`mnist-${kind}-f32.gguf`].logits;
    let maxErr = 0;
    for (let i = 0; i < 16; i++) for (let j = 0; j < 10; j++) maxErr = Math.max(maxErr, Math.abs(logits[i * 10 + j] - want[i][j]));
    assert.ok(maxErr <= 1e-4, `max abs error ${maxErr}`);
    const p = await model.predict(set.images.slice(0, 784));
    assert.equal(p.label, golden.labels[0]);
    assert.ok(Math.abs(p.probabilities.reduce((a, b) => a + b, 0) - 1) < 1e-5);
    model.free();
  });

  test(`mnist-${kind}: accuracy on all 10,000 test images`, async () => {
    const model = await Mnist.load(asset(`mnist-${kind}-f32.gguf`));
    let calls = 0;
    const r = await model.evaluate(set.images, set.labels, { onProgress: () => calls++ });
    assert.equal(r.total, 10000);
    assert.ok(Math.abs(r.accuracy - EXPECTED[kind]) < 1e-9, `accuracy ${r.accuracy}`);
    assert.ok(calls >= 10);
    console.log(`# mnist-${kind} ${engine.simd ? 'simd' : 'scalar'} node: ${(r.accuracy * 100).toFixed(2)}% ${Math.round(r.imagesPerSecond)} images/s`);
    model.free();
  });
}

test('Mnist errors reject with messages', async () => {
  const model = await Mnist.load(asset('mnist-fc-f32.gguf'));
  await assert.rejects(model.predict(new Float32Array(10)), /784/);
  await assert.rejects(Mnist.load(asset('t10k-labels-idx1-ubyte.gz')), (e) => e instanceof Error && /GGUF/i.test(e.message));
  // A GGUF that is not an MNIST model.
  const enc = new TextEncoder();
  const hdr = new Uint8Array(24);
  hdr.set(enc.encode('GGUF'));
  new DataView(hdr.buffer).setUint32(4, 3, true);
  await assert.rejects(Mnist.load(hdr), (e) => e instanceof Error && e.message.length > 0);
});

test('preprocessDigit centres and scales like MNIST', () => {
  const w = 100, h = 100;
  const g = new Float32Array(w * h);
  for (let y = 10; y < 50; y++) for (let x = 5; x < 15; x++) g[y * w + x] = 1; // a bar in a corner
  const x = preprocessDigit(g, w, h);
  let m = 0, cx = 0, cy = 0, top = 28, bottom = -1;
  for (let i = 0; i < 784; i++) {
    if (x[i] > 0) { top = Math.min(top, Math.floor(i / 28)); bottom = Math.max(bottom, Math.floor(i / 28)); }
    m += x[i]; cx += x[i] * (i % 28); cy += x[i] * Math.floor(i / 28);
  }
  assert.ok(Math.abs(cx / m - 13.5) <= 1 && Math.abs(cy / m - 13.5) <= 1);
  assert.equal(bottom - top + 1, 20);
  assert.ok(preprocessDigit(new Float32Array(w * h), w, h).every((v) => v === 0));
});

test('backend option: auto falls back to the CPU with the reason, webgpu rejects, cpu is the default', async () => {
  // Node has no navigator.gpu (the WebGPU runs are in headless Chromium: wasm-tests, e2e).
  const { device, reason } = await webgpuDevice();
  assert.equal(device, null);
  assert.match(reason, /navigator\.gpu|no WebGPU/);
  const def = await Mnist.load(asset('mnist-fc-f32.gguf'));
  assert.deepEqual([def.backendInfo.requested, def.backendInfo.backend, def.backendInfo.adapter], ['cpu', 'cpu', null]);
  def.free();
  const auto = await Mnist.load(asset('mnist-fc-f32.gguf'), { backend: 'auto' });
  assert.equal(auto.backendInfo.backend, 'cpu');
  assert.match(auto.backendInfo.reason, /^auto: no WebGPU/);
  const logits = await auto.logits(set.images.subarray(0, 784));
  assert.equal(logits.length, 10);
  auto.free();
  await assert.rejects(Mnist.load(asset('mnist-fc-f32.gguf'), { backend: 'webgpu' }), /WebGPU is unavailable/);
  await assert.rejects(Mnist.load(asset('mnist-fc-f32.gguf'), { backend: 'tpu' }), /backend must be/);
});
