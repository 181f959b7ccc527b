// The SIMD128 and relaxed-SIMD builds loaded side by side: SmolLM2 Q4_1's prompt logits (the
// 4/5-bit GEMM tiles: exact block sums, then the same f32 steps in both builds) and next-token
// logits (the GEMVs) are bit for bit the same, so a browser without relaxed SIMD generates what
// one with it does. Skipped where relaxed SIMD is missing (see wasm.ts's probe) unless
// GGWEB_RELAXED=1 asks for it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { relaxedSimdSupported } from '../dist/index.js';
import { ROOT, SMOLLM2, PROMPT_IDS } from './helpers.mjs';

const skip = process.env.GGWEB_RELAXED !== '1' && !relaxedSimdSupported() && 'no relaxed SIMD in this Node';
const bits = (a) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

test('SmolLM2 Q4_1: prompt and next-token logits of the SIMD128 build equal the relaxed build bit for bit', { skip }, async () => {
  assert.ok(fs.existsSync(SMOLLM2), `${SMOLLM2} is missing: run scripts/fetch-models.sh`);
  const file = fs.readFileSync(SMOLLM2);
  const run = async (variant) => {
    const engine = await import(`../wasm/${variant}/ggweb.js`);
    await engine.default({ module_or_path: fs.readFileSync(path.join(ROOT, 'www', 'wasm', variant, 'ggweb_bg.wasm')) });
    const stream = new engine.ModelStream(file.length);
    for (let off = 0; off < file.length; off += 1 << 22) stream.push(file.subarray(off, off + (1 << 22)));
    const llm = engine.LlmCore.load(stream, 64, 'cpu');
    const out = [bits(llm.logits(Uint32Array.from(PROMPT_IDS))), bits(llm.logits(Uint32Array.of(761)))];
    llm.free();
    return out;
  };
  const [simd, relaxed] = [await run('simd'), await run('relaxed')];
  assert.deepEqual(simd[0], relaxed[0], 'prompt logits');
  assert.deepEqual(simd[1], relaxed[1], 'next-token logits');
});
