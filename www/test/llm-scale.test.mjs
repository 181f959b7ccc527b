// Loading at scale through the npm package in Node (CPU): a split GGUF (SmolLM2 in 3 parts,
// written at test time into a temp dir) from paths and from Blobs gives the whole file's logits
// bit for bit, with progress over all parts; wrong part lists are refused after part 1's header;
// a model over the wasm heap is an `out-of-memory` error before its body is read; memory() says
// where the bytes are.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { init, LLM } from '../dist/index.js';
import { initOptions, SMOLLM2, PROMPT_IDS } from './helpers.mjs';
import { splitGguf } from './split-gguf.mjs';

await init(initOptions);
assert.ok(fs.existsSync(SMOLLM2), `${SMOLLM2} is missing: run scripts/fetch-models.sh`);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ggweb-split-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const parts = splitGguf(SMOLLM2, dir, 3, 'smollm2');
const whole = await LLM.load(SMOLLM2, { nCtx: 64 });
const reference = await whole.logits(PROMPT_IDS);

test('split GGUF from paths: same logits as the whole file, progress over all parts, memory()', async () => {
  const sizes = parts.map((p) => fs.statSync(p).size);
  const total = sizes.reduce((a, b) => a + b, 0);
  const seen = [];
  const llm = await LLM.load(parts, { nCtx: 64, onProgress: (p) => seen.push(p) });
  assert.equal(llm.loadInfo.parts, 3);
  assert.equal(llm.loadInfo.bytes, total);
  assert.equal(llm.info.fileBytes, total);
  assert.ok(seen.length > 3 && seen.every((p) => p.total === total), 'progress totals');
  assert.equal(seen.at(-1).loaded, total);
  const ours = await llm.logits(PROMPT_IDS);
  assert.ok(ours.every((x, i) => x === reference[i]), 'split logits equal the whole file\'s');
  // CPU: the parts' bytes are the weights, in the heap; the KV cache is f16 keys and values.
  const m = llm.memory();
  const i = llm.info;
  assert.equal(m.weights, total);
  assert.equal(m.weightsHost, total);
  assert.equal(m.weightsGpu, 0);
  assert.equal(m.kvCacheGpu, 0);
  assert.equal(m.kvCache, 2 * 2 * i.nLayer * i.nCtx * i.nHeadKv * (i.nEmbd / i.nHead));
  assert.ok(m.compute > 0 && m.computeGpu === 0 && m.wasmHeap > m.weights, JSON.stringify(m));
  llm.free();
});

test('split GGUF from the path of part 1 alone: the other parts named alike', async () => {
  const llm = await LLM.load(parts[0], { nCtx: 64 });
  assert.equal(llm.loadInfo.parts, 3);
  const ours = await llm.logits(PROMPT_IDS);
  assert.ok(ours.every((x, i) => x === reference[i]));
  llm.free();
  // Part 2 missing: the error names it.
  const lone = path.join(dir, 'lone-00001-of-00003.gguf');
  fs.copyFileSync(parts[0], lone);
  await assert.rejects(LLM.load(lone), /lone-00002-of-00003\.gguf/);
  fs.rmSync(lone);
});

test('split GGUF from Blobs (Files in a page)', async () => {
  const blobs = parts.map((p) => new Blob([fs.readFileSync(p)]));
  const llm = await LLM.load(blobs, { nCtx: 64 });
  const ours = await llm.logits(PROMPT_IDS);
  assert.ok(ours.every((x, i) => x === reference[i]));
  llm.free();
});

test('wrong part lists are refused once part 1\'s header is in', async () => {
  const total = parts.reduce((a, p) => a + fs.statSync(p).size, 0);
  let loaded = 0;
  const onProgress = (p) => (loaded = p.loaded);
  await assert.rejects(LLM.load(parts.slice(0, 2), { onProgress }), (e) =>
    e.code === 'invalid-argument' && /split in 3 parts, 2 given/.test(e.message));
  assert.ok(loaded < fs.statSync(parts[0]).size, `read ${loaded} of ${total} bytes before refusing`);
  await assert.rejects(LLM.load([parts[0], parts[2], parts[1]]), /do not say part 2 of 3/);
  await assert.rejects(LLM.load([parts[1], parts[0], parts[2]]), /give part 1 first/);
  await assert.rejects(LLM.load([SMOLLM2, parts[1]]), /split in 1 parts, 2 given/);
  await assert.rejects(LLM.load([]), (e) => e.code === 'invalid-argument');
  const bad = splitGguf(SMOLLM2, dir, 3, 'bad', 7);
  await assert.rejects(LLM.load(bad), /split.tensors.count/);
});

/** A GGUF header whose one f32 tensor claims 5 GB. */
function hugeHeader() {
  const s = (x) => { const b = Buffer.from(x); const n = Buffer.alloc(8); n.writeBigUInt64LE(BigInt(b.length)); return Buffer.concat([n, b]); };
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
  let h = Buffer.concat([Buffer.from('GGUF'), u32(3), u64(1), u64(1), s('general.architecture'), u32(8), s('llama'),
    s('big'), u32(1), u64(1_250_000_000), u32(0), u64(0)]);
  return Buffer.concat([h, Buffer.alloc(Math.ceil(h.length / 32) * 32 - h.length)]);
}

test('CPU: a model over the wasm heap is out-of-memory before its body is read', async () => {
  // Its size known (a sparse 5 GB file): refused before a byte is read.
  const big = path.join(dir, 'big.gguf');
  fs.writeFileSync(big, hugeHeader());
  fs.truncateSync(big, 5_000_000_000);
  let read = 0;
  await assert.rejects(LLM.load(big, { onProgress: (p) => (read = p.loaded) }), (e) => e.code === 'out-of-memory');
  assert.equal(read, 0);
  fs.rmSync(big);
  // Its size unknown (a chunked download): refused by its header, while the server still sends.
  let sent = 0;
  let closed = false;
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' }); // no Content-Length
    res.write(hugeHeader());
    const timer = setInterval(() => {
      if (sent >= 64 << 20) return;
      res.write(Buffer.alloc(1 << 20));
      sent += 1 << 20;
    }, 20);
    res.on('close', () => { closed = true; clearInterval(timer); });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const url = `http://127.0.0.1:${server.address().port}/big.gguf`;
    await assert.rejects(LLM.load(url, { cache: false }), (e) => e.code === 'out-of-memory' && /by its header/.test(e.message));
    assert.ok(sent < 64 << 20, `${sent} bytes of the body sent before the refusal`);
    await new Promise((r) => setTimeout(r, 100));
    assert.ok(closed, 'the download was cancelled');
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
