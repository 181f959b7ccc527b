// Hostile inputs from JS (the hostile-inputs issue's reproductions): each is an Error with a
// message and a `code`, and the module stays usable afterwards (no wasm trap, no poisoned object).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { init, Graph, loadGGUF } from '../dist/index.js';
import { initOptions } from './helpers.mjs';

await init(initOptions);

const code = (c, re) => (e) => e instanceof Error && e.code === c && (!re || re.test(e.message));

test('huge sizes are typed errors, not wrapped allocations', () => {
  const g = new Graph();
  // 4 * (2^30 + 1) bytes wrapped to 4 on wasm32: an undersized buffer that `neg` wrote past.
  assert.throws(() => g.tensor('f32', [2 ** 30 + 1]), code('too-large'));
  assert.throws(() => g.tensor('f32', [2 ** 16, 2 ** 16]), code('too-large'));
  // The module still works.
  const a = g.fromArray([1, -2, 3]);
  const n = g.neg(a);
  g.computeSync(n);
  assert.deepEqual([...n.readSync()], [-1, 2, -3]);
});

test('a view past its source is a shape error, not heap corruption', () => {
  const g = new Graph();
  const a = g.tensor('f32', [64]);
  assert.throws(() => g.view(a, [16], [], 2 ** 32 - 64), (e) => ['shape', 'too-large'].includes(e.code));
  assert.throws(() => g.view(a, [16], [], 2), code('shape', /multiples of 4/));
  const v = g.view(a, [16], [], 4 * 48);
  assert.deepEqual(v.shape, [16]);
});

test('a soft_max mask with a zero dimension is an error and the graph stays usable', () => {
  const g = new Graph();
  const a = g.tensor('f32', [8, 4, 2]);
  const mask = g.tensor('f32', [8, 4, 0]);
  assert.throws(() => g.softMax(a, { mask }), code('shape'));
  const s = g.softMax(g.fromArray([0, 0]));
  g.computeSync(s);
  assert.deepEqual([...s.readSync()], [0.5, 0.5]);
});

test('get_rows with an id out of range is an invalid-argument error at compute', async () => {
  const g = new Graph();
  const w = g.fromArray([1, 2, 3, 4, 5, 6], [2, 3]);
  const ids = g.tensor('i32', [2], new Int32Array([1, 7]));
  const r = g.getRows(w, ids);
  await assert.rejects(g.compute(r), code('invalid-argument', /row id 7/));
  ids.set(new Int32Array([2, 0]));
  await g.compute(r);
  assert.deepEqual([...(await r.read())], [5, 6, 1, 2]);
});

test('bad GGUF bytes and an abort carry their codes', async () => {
  await assert.rejects(loadGGUF(new TextEncoder().encode('NOPE this is not a gguf file at all')), code('bad-gguf'));
  const c = new AbortController();
  c.abort();
  await assert.rejects(loadGGUF(new Uint8Array(16), { signal: c.signal }), (e) => e.name === 'AbortError' && e.code === 'aborted');
});
