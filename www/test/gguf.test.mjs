import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { init, loadGGUF, inspectGGUF } from '../dist/index.js';
import { asset, initOptions } from './helpers.mjs';

await init(initOptions);

test('loadGGUF from a path: header, metadata, tensors', async () => {
  let last = null;
  const g = await loadGGUF(asset('mnist-fc-f32.gguf'), { onProgress: (p) => (last = p) });
  assert.equal(g.version, 3);
  assert.equal(g.architecture, 'mnist-fc');
  assert.equal(g.metadata['general.architecture'], 'mnist-fc');
  assert.equal(g.metadataTypes['general.architecture'], 'string');
  const names = g.tensors.map((t) => t.name).sort();
  assert.deepEqual(names, ['fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight']);
  const w = g.tensor('fc1.weight');
  assert.deepEqual(w.shape, [784, 500]);
  assert.equal(w.type, 'f32');
  assert.equal(w.byteSize, 784 * 500 * 4);
  assert.equal(w.offset, g.dataOffset + w.relativeOffset);
  assert.equal(g.fileSize, fs.statSync(asset('mnist-fc-f32.gguf')).size);
  assert.equal(last.loaded, g.fileSize);
  assert.ok(g.hasData);
  g.free();
});

test('loadGGUF from bytes, Blob, and header-only reads stop early', async () => {
  const bytes = fs.readFileSync(asset('mnist-cnn-f32.gguf'));
  const a = await loadGGUF(new Uint8Array(bytes));
  const b = await loadGGUF(new Blob([bytes]));
  assert.deepEqual(a.tensors, b.tensors);
  assert.equal(a.architecture, 'mnist-cnn');
  assert.deepEqual(a.tensor('conv1.kernel').shape, [3, 3, 1, 8]);
  const big = fs.readFileSync(asset('mnist-fc-f32.gguf'));
  let read = 0;
  const h = await inspectGGUF(new Blob([big]), { onProgress: (p) => (read = p.loaded) });
  assert.equal(h.hasData, false);
  assert.ok(read < big.length, `header-only read ${read} of ${big.length} bytes`);
  assert.equal(h.tensors.length, 4);
  a.free();
  b.free();
});

test('64-bit metadata values are bigint', async () => {
  // A GGUF with a u64 and an i64 value, no tensors (built by hand).
  const enc = new TextEncoder();
  const parts = [];
  const u32 = (x) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, x, true); parts.push(b); };
  const u64 = (x) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(x), true); parts.push(b); };
  const str = (s) => { const e = enc.encode(s); u64(e.length); parts.push(e); };
  parts.push(enc.encode('GGUF')); u32(3); u64(0); u64(2);
  str('a.big'); u32(10); u64(2n ** 63n + 5n);
  str('a.neg'); u32(11); { const b = new Uint8Array(8); new DataView(b.buffer).setBigInt64(0, -7n, true); parts.push(b); }
  const file = new Uint8Array(await new Blob(parts).arrayBuffer());
  const g = await loadGGUF(file);
  assert.equal(g.metadata['a.big'], 2n ** 63n + 5n);
  assert.equal(g.metadata['a.neg'], -7n);
  assert.equal(g.metadataTypes['a.big'], 'u64');
  assert.equal(g.tensors.length, 0);
});

test('malformed GGUF rejects with a message', async () => {
  await assert.rejects(loadGGUF(new TextEncoder().encode('NOPE this is not a gguf file at all')), (e) => {
    assert.ok(e instanceof Error);
    assert.match(e.message, /GGUF/i);
    return true;
  });
  const bytes = fs.readFileSync(asset('mnist-fc-f32.gguf'));
  await assert.rejects(loadGGUF(bytes.subarray(0, 100)), (e) => e instanceof Error && /truncated|GGUF/i.test(e.message));
  await assert.rejects(loadGGUF(bytes.subarray(0, bytes.length - 4000)), (e) => e instanceof Error && e.message.length > 0);
  await assert.rejects(loadGGUF('/nonexistent/file.gguf'), (e) => e instanceof Error && /ENOENT/.test(e.message));
});

test('abort signal rejects', async () => {
  const c = new AbortController();
  c.abort();
  await assert.rejects(loadGGUF(asset('mnist-fc-f32.gguf'), { signal: c.signal }), (e) => e.name === 'AbortError');
});
