// Sentence embeddings (all-MiniLM-L6-v2, scripts/fetch-models.sh) through the npm package in Node:
// vectors equal to llama.cpp's llama-embedding (native-tests/data/minilm-embeddings.json),
// sentence-transformers' similarity figure, ranking, errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { init, Embedder, EmbeddingModel, cosineSimilarity, rankBySimilarity } from '../dist/index.js';
import { initOptions, MODELS, ROOT } from './helpers.mjs';

await init(initOptions);
const MINILM = path.join(MODELS, 'all-MiniLM-L6-v2.f16.gguf');
assert.ok(fs.existsSync(MINILM), `${MINILM} is missing: run scripts/fetch-models.sh`);
const model = await Embedder.load(MINILM);

test('load: info', () => {
  assert.equal(EmbeddingModel, Embedder);
  assert.deepEqual([model.info.nEmbd, model.info.pooling, model.info.maxTokens], [384, 'mean', 512]);
  assert.deepEqual([...model.tokenize('Hello')].slice(0, 1), [101]);
  assert.equal(model.tokenize('Hello').at(-1), 102);
});

test('embeddings equal llama-embedding (cosine >= 0.999 each)', async () => {
  const ref = JSON.parse(fs.readFileSync(path.join(ROOT, 'native-tests', 'data', 'minilm-embeddings.json'), 'utf8'));
  const got = await model.embed(ref.texts);
  assert.equal(got.length, ref.texts.length);
  got.forEach((v, i) => {
    assert.ok(v instanceof Float32Array && v.length === 384);
    const c = cosineSimilarity(v, ref.embeddings[i]);
    assert.ok(c >= 0.999, `${ref.texts[i]}: cosine ${c}`);
  });
  const sim = cosineSimilarity(got[0], got[1]);
  assert.ok(Math.abs(sim - 0.755) < 0.005, `food/bread similarity ${sim}`);
  console.log(`food/bread similarity ${sim.toFixed(4)}`);
});

test('ranking and concurrent calls', async () => {
  const docs = ['The cat sits on the mat.', 'Stock markets fell sharply today.', 'A kitten is resting on a rug.'];
  const [q, ...d] = await Promise.all([model.embed('Where is the cat?'), model.embed(docs)]).then(([a, b]) => [a[0], ...b]);
  const ranked = rankBySimilarity(q, d);
  assert.equal(ranked.length, 3);
  assert.notEqual(ranked[0].index, 1, 'finance is not the best match for a cat question');
  assert.equal(ranked[2].index, 1);
});

test('errors are rejected promises with a code', async () => {
  await assert.rejects(model.embed(['word '.repeat(600)]), (e) => e.code === 'invalid-argument');
  await assert.rejects(Embedder.load(path.join(MODELS, 'SmolLM2-135M-Instruct.Q4_1.gguf')), (e) => /not a BERT embedding model/.test(e.message) && typeof e.code === 'string');
  assert.throws(() => cosineSimilarity([1, 2], [1]), (e) => e.code === 'invalid-argument');
  const tmp = await Embedder.load(MINILM);
  tmp.dispose();
  await assert.rejects(tmp.embed('x'), (e) => e.code === 'disposed');
});

test('a split GGUF: from its parts or part 1 alone, the whole file\'s vectors', async () => {
  const { splitGguf } = await import('./split-gguf.mjs');
  const os = await import('node:os');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ggweb-embed-split-'));
  try {
    const parts = splitGguf(MINILM, dir, 3, 'minilm');
    const texts = ['A man is eating food.', 'The cat sits on the mat.'];
    const whole = await model.embed(texts);
    for (const src of [parts, parts[0]]) {
      const m = await Embedder.load(src);
      const got = await m.embed(texts);
      m.dispose();
      got.forEach((v, i) => assert.ok(v.every((x, j) => x === whole[i][j]), 'split vectors equal the whole file\'s'));
    }
    await assert.rejects(Embedder.load([parts[0], parts[1]]), (e) => e.code === 'invalid-argument' && /split in 3 parts, 2 given/.test(e.message));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
