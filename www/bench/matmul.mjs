// mul_mat GFLOP/s of the wasm engine (Node): f32, q4_0, q8_0 weights [K, M] times f32 [K, N].
// Usage: node bench/matmul.mjs [simd=1|0] [N=16]   (single thread, as in the browser)
import { init, Graph } from '../dist/index.js';

const simd = process.argv[2] === undefined ? undefined : process.argv[2] === '1';
const N = Number(process.argv[3] ?? 16);
const engine = await init(simd === undefined ? {} : { simd });
const K = 4096, M = 1024;
const rand = (n, seed) => {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32) * 2 - 1);
};
const W = rand(K * M, 1), X = rand(K * N, 2);
const out = { kernels: engine.kernels, N, results: {} };
for (const type of ['f32', 'q4_0', 'q8_0']) {
  const g = new Graph();
  const a = g.tensor(type, [K, M], W), b = g.tensor('f32', [K, N], X);
  const c = g.mulMat(a, b);
  g.computeSync(c); // warm-up (allocates)
  let best = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    g.computeSync(c);
    best = Math.min(best, performance.now() - t0);
  }
  out.results[type] = +((2 * K * M * N) / (best / 1000) / 1e9).toFixed(2);
  g.free();
}
console.log(JSON.stringify(out));
