// Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2) through the npm package in Node (CPU build) against
// llama.cpp's references in native-tests/data/qwen2 (see its README): prompt ids, argmax at every
// prompt position, last-position KL, greedy 32 tokens. ~30 s (a 491 MB model on one wasm thread),
// so scripts/test-web.sh runs it once, with the default build, not per variant as test/
// (`npm run test:models` in www/ after scripts/build-web.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { init, LLM } from '../dist/index.js';
import { initOptions, QWEN2, QWEN2_DATA as DATA, compareLogits, readF16 } from '../test/helpers.mjs';

const ref = JSON.parse(fs.readFileSync(path.join(DATA, 'logits.json'), 'utf8'));

const argmax = (v) => { let b = 0; for (let i = 1; i < v.length; i++) if (v[i] > v[b]) b = i; return b; };

await init(initOptions);
assert.ok(fs.existsSync(QWEN2), `${QWEN2} is missing: run scripts/fetch-models.sh`);
const llm = await LLM.load(QWEN2, { nCtx: 128 });

test('qwen2: info and prompt ids', async () => {
  assert.equal(llm.info.architecture, 'qwen2');
  assert.equal(llm.info.nVocab, 151936);
  assert.deepEqual(await llm.tokenize(ref.prompt), ref.prompt_ids);
});

test('qwen2: last-position logits vs llama.cpp (batch), argmax at every position (token by token)', async () => {
  llm.reset();
  const last = await llm.logits(ref.prompt_ids);
  const c = compareLogits(last, readF16(fs.readFileSync(path.join(DATA, 'logits.last.f16'))));
  console.log(`qwen2 last: argmax ${c.argmaxOurs}/${c.argmaxRef}, max abs ${c.maxAbs.toFixed(4)}, KL ${c.kl.toExponential(3)}`);
  assert.equal(c.argmaxOurs, c.argmaxRef);
  assert.ok(c.kl < 0.01, `KL ${c.kl}`);
  // Every prefix: the KV cache keeps the previous one, so each call evaluates one new token.
  llm.reset();
  for (let p = 0; p < ref.prompt_ids.length; p++) {
    const l = await llm.logits(ref.prompt_ids.slice(0, p + 1));
    assert.equal(argmax(l), ref.positions[p].argmax, `position ${p} (llama.cpp gap ${ref.positions[p].gap})`);
  }
});

test('qwen2: greedy 32 tokens equal llama.cpp up to the first near-tie', async () => {
  llm.reset();
  const want = [];
  for (const [id, gap] of ref.greedy) {
    if (gap < 0.1) break;
    want.push(id);
  }
  const r = await llm.complete(ref.prompt_ids, { maxTokens: want.length, temperature: 0 });
  console.log(`qwen2 greedy: ${JSON.stringify(r.text)} gen ${r.stats.genTokPerS.toFixed(1)} tok/s`);
  assert.deepEqual(r.tokens, want);
});
