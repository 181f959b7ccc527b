// The threads build (shared memory, CPU backend on worker_threads) against the single-thread
// relaxed-SIMD build, loaded side by side in this process: MNIST fc/cnn logits (f32) and SmolLM2
// Q4_1 logits (integer-dot kernels) on 1, 2 and 3 threads are bit for bit the single-thread
// build's. Both builds run the same relaxed-SIMD kernels and every output element is computed by
// one thread, so the f32 results are exact too. Skipped where relaxed SIMD is missing (Node 20
// without --experimental-wasm-relaxed-simd, or without --no-liftoff: see wasm.ts's probe) unless
// GGWEB_RELAXED=1 asks for it: the threads build is a relaxed-SIMD build.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { init, setThreads, relaxedSimdSupported, threadsSupport, chooseBackend, loadMnistSet } from '../dist/index.js';
import { ROOT, asset, SMOLLM2, PROMPT_IDS } from './helpers.mjs';

const skip = process.env.GGWEB_RELAXED !== '1' && !relaxedSimdSupported() && 'no relaxed SIMD in this Node';
const wasm = (v) => path.join(ROOT, 'www', 'wasm', v);

let single, threads, info, set;
if (!skip) {
  info = await init({ threads: true, nThreads: 3 });
  threads = await import('../wasm/threads/ggweb.js');
  single = await import('../wasm/relaxed/ggweb.js');
  await single.default({ module_or_path: fs.readFileSync(path.join(wasm('relaxed'), 'ggweb_bg.wasm')) });
  set = await loadMnistSet(asset('t10k-images-idx3-ubyte.gz'), asset('t10k-labels-idx1-ubyte.gz'));
}

const bits = (a) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

test('init: the threads build with 3 threads, and why', { skip }, async () => {
  assert.equal(info.build, 'threads');
  assert.equal(info.threads, 3);
  assert.ok(info.relaxed && info.simd);
  assert.match(info.reason, /^threads build, 3 threads: threads: true$/);
  assert.deepEqual(threadsSupport(), { ok: true, reason: 'Node (worker_threads)' });
  assert.equal(threads.threadsEnabled(), true);
  assert.equal(single.threadsEnabled(), false);
  assert.equal(threads.threadsWorkers(), 2);
  assert.equal((await chooseBackend('cpu')).cpuThreads, 3);
  // WebGPU is not in the threads build: auto falls back to the CPU, webgpu says why.
  const auto = await chooseBackend('auto');
  assert.equal(auto.backend, 'cpu');
  assert.match(auto.reason, /threads build of the ggweb engine has no WebGPU backend/);
  await assert.rejects(chooseBackend('webgpu'), /init\(\{ threads: false \}\)/);
  await assert.rejects(setThreads(-1), /invalid argument/);
  await setThreads(0);
});

for (const kind of ['fc', 'cnn']) {
  test(`mnist-${kind}: logits on 1, 2, 3 threads equal the single-thread build's bit for bit`, { skip }, async () => {
    const bytes = fs.readFileSync(asset(`mnist-${kind}-f32.gguf`));
    const images = set.images.subarray(0, 64 * 784);
    const s = single.MnistCore.fromBytes(bytes, 'cpu');
    const want = bits(s.predictBatch(images));
    s.free();
    for (const n of [1, 2, 3]) {
      assert.equal(await setThreads(n), n);
      const m = threads.MnistCore.fromBytes(bytes, 'cpu');
      assert.deepEqual(bits(m.predictBatch(images)), want, `${n} threads`);
      assert.deepEqual(bits(m.predictBatch(images)), want, `${n} threads, again`);
      m.free();
    }
  });
}

test('SmolLM2 Q4_1: prompt logits and generated tokens\' logits on 1, 2, 3 threads equal the single-thread build bit for bit', { skip }, async () => {
  assert.ok(fs.existsSync(SMOLLM2), `${SMOLLM2} is missing: run scripts/fetch-models.sh`);
  const file = fs.readFileSync(SMOLLM2);
  const load = (engine) => {
    const stream = new engine.ModelStream(file.length);
    for (let off = 0; off < file.length; off += 1 << 22) stream.push(file.subarray(off, off + (1 << 22)));
    return engine.LlmCore.load(stream, 256, 'cpu');
  };
  // A 154-token prompt, then three generated tokens over the cache (logits of the prompt plus
  // them: the cached prefix is reused, only the new token is evaluated), whose fused attention
  // splits the cache into chunks; and a fresh one-token context.
  const prompt = Array.from({ length: 154 }, (_, i) => PROMPT_IDS[i % PROMPT_IDS.length]);
  const run = (llm) => {
    const out = [bits(llm.logits(Uint32Array.from(prompt)))];
    const ids = [...prompt];
    for (const t of [28, 4372, 17]) {
      ids.push(t);
      out.push(bits(llm.logits(Uint32Array.from(ids))));
    }
    assert.equal(llm.nPast, ids.length, 'the cached prefix was reused');
    out.push(bits(llm.logits(Uint32Array.of(761))));
    return out;
  };
  const s = load(single);
  const want = run(s);
  s.free();
  for (const n of [1, 2, 3]) {
    await setThreads(n);
    const llm = load(threads);
    const got = run(llm);
    llm.free();
    assert.deepEqual(got[0], want[0], `${n} threads: prompt logits`);
    for (let i = 1; i < 4; i++) assert.deepEqual(got[i], want[i], `${n} threads: generated token ${i}'s logits`);
    assert.deepEqual(got[4], want[4], `${n} threads: a one-token context's logits`);
  }
  await setThreads(0);
});
