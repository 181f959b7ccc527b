// SmolLM2 last-position logits of one wasm build against llama.cpp's reference (the bound of
// www/test/llm.test.mjs: max abs <= 1.0, KL < 0.01, same argmax), for A/B of builds:
//   node --experimental-wasm-relaxed-simd --no-liftoff bench/parity.mjs KIND [path/to/ggweb_bg.wasm] [--save out.f32] [--all]
// KIND: simd | relaxed | scalar. --save writes the logits (to diff two builds). --all also
// compares the last position of every prefix of the prompt with llama.cpp's logits of that
// position (11 samples of the same bound instead of 1).
import fs from 'node:fs';
import path from 'node:path';
import { init, LLM } from '../dist/index.js';
import { SMOLLM2, REFERENCE, PROMPT_IDS, compareLogits } from '../test/helpers.mjs';

const [kind = 'simd', wasm] = process.argv.slice(2).filter((a, i, all) => !a.startsWith('--') && all[i - 1] !== '--save');
const si = process.argv.indexOf('--save');
const info = await init({ simd: kind !== 'scalar', relaxed: kind === 'relaxed', ...(wasm ? { wasm } : {}) });
const llm = await LLM.load(SMOLLM2, { nCtx: 512 });
const ref = new Float32Array(fs.readFileSync(path.join(REFERENCE, 'logits_smollm2_t1.last.f32')).buffer.slice(0));
const ours = await llm.logits(PROMPT_IDS);
const c = compareLogits(ours, ref);
let worst = 0;
for (let i = 0; i < ref.length; i++) if (Math.abs(ours[i] - ref[i]) > Math.abs(ours[worst] - ref[worst])) worst = i;
console.log(JSON.stringify({ kind, wasm: wasm ?? null, kernels: info.kernels, relaxed: info.relaxed, argmax: [c.argmaxOurs, c.argmaxRef],
  maxAbs: +c.maxAbs.toFixed(4), kl: c.kl, worst: { token: worst, ours: ours[worst], ref: ref[worst] } }));
if (process.argv.includes('--all')) {
  const all = new Float32Array(fs.readFileSync(path.join(REFERENCE, 'logits_smollm2_t1.all.f32')).buffer.slice(0));
  const nv = ref.length;
  const per = [];
  for (let p = 1; p <= PROMPT_IDS.length; p++) {
    llm.reset?.();
    const o = await llm.logits(PROMPT_IDS.slice(0, p));
    const cp = compareLogits(o, all.subarray((p - 1) * nv, p * nv));
    per.push({ maxAbs: +cp.maxAbs.toFixed(3), kl: +cp.kl.toExponential(2), argmaxOk: cp.argmaxOurs === cp.argmaxRef });
  }
  console.log(JSON.stringify({ kind, perPosition: per.map((x) => x.maxAbs), kl: per.map((x) => x.kl), argmaxOk: per.every((x) => x.argmaxOk),
    worst: Math.max(...per.map((x) => x.maxAbs)), mean: +(per.reduce((a, x) => a + x.maxAbs, 0) / per.length).toFixed(3) }));
}
if (si > 0) fs.writeFileSync(process.argv[si + 1], Buffer.from(ours.buffer, ours.byteOffset, ours.byteLength));
llm.free?.();
