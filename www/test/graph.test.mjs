import { test } from 'node:test';
import assert from 'node:assert/strict';
import { init, Graph, loadGGUF, simdSupported, relaxedSimdSupported } from '../dist/index.js';
import { asset, initOptions } from './helpers.mjs';

const info = await init(initOptions);

test('init loads the requested build, else the best one the engine validates', () => {
  const simd = initOptions.simd ?? simdSupported();
  const relaxed = simd && (initOptions.relaxed ?? relaxedSimdSupported());
  // The kernels string comes from the loaded wasm itself.
  assert.deepEqual([info.simd, info.relaxed], [simd, relaxed]);
  assert.equal(info.kernels, relaxed ? 'wasm32 simd128 + relaxed-simd' : simd ? 'wasm32 simd128' : 'scalar');
  console.log(`# engine: ${info.kernels}`);
});
const close = (a, b, tol = 1e-5) => {
  assert.equal(a.length, b.length);
  for (let i = 0; i < a.length; i++) assert.ok(Math.abs(a[i] - b[i]) <= tol * Math.max(1, Math.abs(b[i])), `[${i}] ${a[i]} vs ${b[i]}`);
};

test('add + relu + scale', async () => {
  const g = new Graph();
  const a = g.tensor('f32', [4, 3], Float32Array.from({ length: 12 }, (_, i) => i - 6));
  const b = g.fromArray([1, 1, 1, 1], [4]); // broadcast over rows
  const c = a.add(b).relu().scale(2, 0.5);
  await g.compute(c);
  close(await c.read(), Float32Array.from({ length: 12 }, (_, i) => Math.max(0, i - 5) * 2 + 0.5));
  assert.deepEqual(c.shape, [4, 3]);
  assert.equal(c.type, 'f32');
  g.free();
});

test('mulMat follows ggml (rows of k): [k,m] x [k,n] -> [m,n]', async () => {
  const g = await Graph.create();
  const k = 5, m = 3, n = 2;
  const A = Float32Array.from({ length: k * m }, (_, i) => Math.sin(i));
  const B = Float32Array.from({ length: k * n }, (_, i) => Math.cos(i));
  const a = g.tensor('f32', [k, m], A), b = g.tensor('f32', [k, n], B);
  const c = g.mulMat(a, b);
  await g.compute(c);
  const want = new Float32Array(m * n);
  for (let j = 0; j < n; j++) for (let i = 0; i < m; i++) { let s = 0; for (let t = 0; t < k; t++) s += A[i * k + t] * B[j * k + t]; want[j * m + i] = s; }
  assert.deepEqual(c.shape, [m, n]);
  close(await c.read(), want);
});

test('softMax, rmsNorm, norm, views and getRows', async () => {
  const g = new Graph();
  const x = g.tensor('f32', [3, 2], [1, 2, 3, 0, 0, 0]);
  const s = x.softMax(), r = x.rmsNorm(1e-6), t = x.transpose(), tc = t.cont(), p = x.permute(1, 0);
  const rows = g.tensor('i32', [3], new Int32Array([1, 0, 1]));
  const gr = g.getRows(x, rows);
  await g.compute(s, r, tc, gr, p);
  const e = [1, 2, 3].map(Math.exp), z = e[0] + e[1] + e[2];
  close((await s.read()).subarray(0, 3), e.map((v) => v / z));
  close((await s.read()).subarray(3), [1 / 3, 1 / 3, 1 / 3]);
  const rms = Math.sqrt((1 + 4 + 9) / 3);
  close((await r.read()).subarray(0, 3), [1 / rms, 2 / rms, 3 / rms], 1e-4);
  close(await tc.read(), [1, 0, 2, 0, 3, 0]);
  close(await t.read(), [1, 0, 2, 0, 3, 0]); // strided read of a view
  close(await gr.read(), [0, 0, 0, 1, 2, 3, 0, 0, 0]);
  assert.deepEqual(x.reshape(6).shape, [6]);
});

test('weights from a GGUF: the fc model by hand', async () => {
  const g = new Graph();
  const w = await g.weights(asset('mnist-fc-f32.gguf'));
  assert.deepEqual(Object.keys(w).sort(), ['fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight']);
  const img = g.tensor('f32', [784, 1], new Float32Array(784).fill(0.5));
  const h = w['fc1.weight'].mulMat(img).add(w['fc1.bias']).relu();
  const out = w['fc2.weight'].mulMat(h).add(w['fc2.bias']);
  await g.compute(out);
  const logits = await out.read();
  assert.equal(logits.length, 10);
  assert.ok(logits.every(Number.isFinite));
});

test('errors are thrown as Error with the Rust message', async () => {
  const g = new Graph();
  const a = g.tensor('f32', [4, 3]), b = g.tensor('f32', [3, 4]);
  assert.throws(() => a.add(b), /shape error|broadcast/);
  assert.throws(() => g.tensor('f99', [2]), /unknown tensor type/);
  assert.throws(() => g.tensor('f32', [1, 2, 3, 4, 5]), /1 to 4 dimensions/);
  assert.throws(() => a.set(new Float32Array(5)), /12 elements/);
  assert.throws(() => g.tensor('q4_0', [33]), /block size/);
  assert.throws(() => a.mulMat(b), /shape|mul_mat|MUL_MAT/i);
  const other = new Graph();
  assert.throws(() => g.add(a, other.tensor('f32', [4, 3])), /this graph/);
  const gg = await loadGGUF(asset('mnist-cnn-f32.gguf'), { headerOnly: true });
  await assert.rejects(g.weights(gg), /headerOnly/);
});

test('backend option: auto falls back to the CPU with the reason, webgpu rejects, cpu is the default', async () => {
  const def = await Graph.create();
  assert.deepEqual([def.backendInfo.requested, def.backendInfo.backend, def.backendInfo.adapter], ['cpu', 'cpu', null]);
  assert.deepEqual(new Graph().backendInfo.backend, 'cpu');
  const g = await Graph.create({ backend: 'auto' });
  assert.equal(g.backendInfo.backend, 'cpu');
  assert.equal(g.backendInfo.requested, 'auto');
  assert.match(g.backendInfo.reason, /^auto: no WebGPU \(.+\), so the CPU$/);
  // It computes (on the CPU), synchronously too, and has no WebGPU placements.
  const a = g.fromArray([1, -2, 3]);
  const b = a.relu();
  await g.compute(b);
  assert.deepEqual(Array.from(await b.read()), [1, 0, 3]);
  g.computeSync(b);
  assert.equal(g.backendInfo.placements, undefined);
  await assert.rejects(Graph.create({ backend: 'webgpu' }), /backend 'webgpu' requested but WebGPU is unavailable/);
  await assert.rejects(Graph.create({ backend: 'tpu' }), /backend must be/);
});

test('recompute after set gives the new values', async () => {
  const g = await Graph.create({ backend: 'auto' });
  const x = g.fromArray([1, 2, 3]);
  const y = x.sqr().sum();
  await g.compute(y);
  assert.deepEqual(Array.from(await y.read()), [14]);
  x.set(new Float32Array([2, 0, -1]));
  await g.compute(y);
  assert.deepEqual(Array.from(await y.read()), [5]);
});
