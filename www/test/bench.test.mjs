import { test } from 'node:test';
import assert from 'node:assert/strict';
import { init, benchMulMat } from '../dist/index.js';
import { initOptions } from './helpers.mjs';

const info = await init(initOptions);

test('benchMulMat repacks the weight as an LLM load does, and rotates over copies', async () => {
  // The SIMD builds' GEMV reads repacked q4_1 (backend::cpu::repack::pays_for); the scalar build
  // keeps weights plain.
  const r = await benchMulMat({ backend: 'cpu', type: 'q4_1', m: 12, n: 1, k: 64, seconds: 0.01, repack: true, copies: 3 });
  assert.equal(r.repacked, info.simd);
  assert.ok(r.runs >= 3 && r.gflops > 0 && r.secondsPerRun > 0, JSON.stringify(r));
  // The CPU products were checked against the scalar reference (a wrong kernel rejects).
  assert.equal(r.verified, true);
  // f32 weights are never repacked; without `repack` nothing is.
  assert.equal((await benchMulMat({ backend: 'cpu', type: 'f32', m: 8, n: 1, k: 32, seconds: 0.01, repack: true })).repacked, false);
  assert.equal((await benchMulMat({ backend: 'cpu', type: 'q4_1', m: 8, n: 1, k: 32, seconds: 0.01 })).repacked, false);
});

test('benchMulMat rejects a bad copies count with a code, and stays usable', async () => {
  for (const copies of [0, 2.5, 5000, Number.NaN]) {
    await assert.rejects(benchMulMat({ backend: 'cpu', type: 'q8_0', m: 4, n: 1, k: 32, copies }), (e) => {
      assert.equal(e.code, 'invalid-argument');
      assert.match(e.message, /copies/);
      return true;
    });
  }
  // A size the engine refuses is rejected too (its own check), and nothing leaks into the next call.
  await assert.rejects(benchMulMat({ backend: 'cpu', type: 'q8_0', m: 1 << 20, n: 1, k: 1 << 20, copies: 2 }), (e) => typeof e.code === 'string');
  const ok = await benchMulMat({ backend: 'cpu', type: 'q8_0', m: 4, n: 1, k: 32, seconds: 0.01, copies: 2, repack: true });
  assert.equal(ok.repacked, info.simd);
});
