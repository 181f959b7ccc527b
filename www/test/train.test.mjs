// Training from JS: the graph API's params / backward / optimizer ops on a linear regression
// (gradients against central finite differences), and the MNIST Trainer in a worker_threads
// worker: one epoch on 6,000 training images reaching >= 90 % on the 10,000 t10k images, stop /
// abort / resume, hostile inputs rejected with codes and the trainer usable after them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { init, Graph, Trainer, LocalTrainer, Mnist, loadMnistSet } from '../dist/index.js';
import { ROOT, asset, initOptions } from './helpers.mjs';

const engine = await init(initOptions);
const DATA = path.join(ROOT, '..', 'shared', 'fixtures', 'mnist');
const trainImagesIdx = fs.readFileSync(path.join(DATA, 'train-images-idx3-ubyte.gz'));
const trainLabelsIdx = fs.readFileSync(path.join(DATA, 'train-labels-idx1-ubyte.gz'));
const testSet = await loadMnistSet(asset('t10k-images-idx3-ubyte.gz'), asset('t10k-labels-idx1-ubyte.gz'));
const idxData = (limit) => ({ imagesIdx: new Uint8Array(trainImagesIdx), labelsIdx: new Uint8Array(trainLabelsIdx), limit });
// The worker runs the same build as this process.
const workerEngine = { ...initOptions };
const codeIs = (code) => (e) => {
  assert.equal(e.code, code, `${e.code}: ${e.message}`);
  return true;
};

/** y = w·x + b on n points of k features (no noise): the graph, its loss and parameters. */
function regression(n, k, wTrue, bTrue) {
  const g = new Graph();
  let s = 12345;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  const xs = Float32Array.from({ length: n * k }, rnd);
  const ys = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    let v = bTrue;
    for (let j = 0; j < k; j++) v += wTrue[j] * xs[i * k + j];
    ys[i] = v;
  }
  const x = g.tensor('f32', [k, n], xs);
  const y = g.tensor('f32', [1, n], ys);
  const w = g.param([k, 1], Float32Array.from({ length: k }, (_, j) => 0.1 * (j + 1)));
  const b = g.param([1], [0.3]);
  const pred = w.mulMat(x).add(b); // [1, n]
  const loss = pred.sub(y).sqr().sum().scale(1 / n);
  return { g, w, b, loss };
}

test('graph: gradients of a linear regression match central finite differences', async () => {
  const { g, w, b, loss } = regression(37, 5, [0.5, -1, 2, 0.25, -0.75], 0.4);
  assert.equal(w.grad, null); // no backward yet
  loss.backward();
  const gw = w.grad, gb = b.grad;
  assert.ok(gw && gb);
  assert.equal(gw.size, 5);
  await g.compute(loss, gw, gb);
  const analytic = [...(await gw.read()), ...(await gb.read())];
  const f = async () => {
    await g.compute(loss);
    return (await loss.read())[0];
  };
  const h = 1e-2;
  const numeric = [];
  for (const [t, n] of [[w, 5], [b, 1]]) {
    const v0 = await t.read();
    for (let i = 0; i < n; i++) {
      const v = Float32Array.from(v0);
      v[i] = v0[i] + h;
      t.set(v);
      const up = await f();
      v[i] = v0[i] - h;
      t.set(v);
      const down = await f();
      t.set(v0);
      numeric.push((up - down) / (2 * h));
    }
  }
  for (let i = 0; i < numeric.length; i++) {
    assert.ok(Math.abs(analytic[i] - numeric[i]) <= 1e-3 * Math.max(1, Math.abs(numeric[i])), `[${i}] ${analytic[i]} vs ${numeric[i]}`);
  }
  g.free();
});

test('graph: SGD and AdamW steps (graph ops) fit the regression', async () => {
  const wTrue = [0.5, -1, 2];
  for (const type of ['sgd', 'adamw']) {
    const { g, w, b, loss } = regression(64, 3, wTrue, 0.4);
    g.backward(loss);
    const opt = g.optimizer([w, b], { type, lr: type === 'sgd' ? 0.3 : 0.05 });
    await g.compute(loss);
    const first = (await loss.read())[0];
    for (let i = 0; i < 400; i++) await opt.step(loss);
    assert.equal(opt.steps, 400);
    await g.compute(loss);
    const last = (await loss.read())[0];
    const wv = await w.read(), bv = (await b.read())[0];
    const worst = Math.max(...wTrue.map((t, j) => Math.abs(wv[j] - t)), Math.abs(bv - 0.4));
    assert.ok(last < first * 1e-3 && worst < 1e-2, `${type}: loss ${first} -> ${last}, worst weight error ${worst}`);
    g.free();
  }
});

test('graph: training mistakes are errors with codes, the graph usable after', async () => {
  const { g, w, b, loss } = regression(8, 2, [1, 1], 0);
  const h = w.mulMat(g.tensor('f32', [2, 8]));
  assert.throws(() => h.setParam(), codeIs('invalid-argument')); // not a leaf
  assert.throws(() => g.backward(h), codeIs('invalid-argument')); // not a scalar
  assert.throws(() => g.backward(g.tensor('f32', [1]).sum()), codeIs('invalid-argument')); // no parameter
  assert.throws(() => g.optimizer([w]), codeIs('invalid-argument')); // no backward yet
  assert.throws(() => new Graph().backward(loss), codeIs('invalid-argument')); // another graph's
  // A path through an op without a backward (the labels of a cross-entropy) is an error naming it.
  const ce = g.crossEntropyLoss(g.tensor('f32', [4, 2]), g.param([4, 2]));
  assert.throws(() => ce.backward(), (e) => e.code === 'unsupported' && /cross_entropy/i.test(e.message));
  loss.backward();
  assert.throws(() => g.optimizer([w, b], { lr: -1 }), codeIs('invalid-argument'));
  assert.throws(() => g.optimizer([w, b], { type: 'lion' }), codeIs('invalid-argument'));
  const opt = g.optimizer([w, b], { type: 'sgd', lr: 0.1 });
  opt.stepSync(loss);
  assert.ok(Number.isFinite((await loss.read())[0]));
  g.free();
});

test(`Trainer (worker): one epoch of mnist-fc on 6,000 images reaches >= 90 % (${engine.build} build)`, async () => {
  const t = await Trainer.create({ model: 'fc', epochs: 1, batchSize: 32, lr: 2e-3, seed: 7, engine: workerEngine });
  assert.equal(t.info.model, 'fc');
  assert.equal(t.info.build, engine.build);
  let steps = 0, epochs = 0, lastStep = null;
  const r = await t.fit(idxData(6000), {
    onStep: (s) => {
      assert.ok(Number.isFinite(s.loss) && s.accuracy >= 0 && s.accuracy <= 1);
      assert.equal(s.step, steps);
      steps++;
      lastStep = s;
    },
    onEpoch: () => epochs++,
  });
  assert.equal(steps, Math.floor(5700 / 32));
  assert.equal(lastStep.stepsPerEpoch, steps);
  assert.deepEqual([epochs, r.epochs.length, r.steps, r.done, r.stopped], [1, 1, steps, true, false]);
  const e = r.epochs[0];
  assert.equal(e.validation.images, 300);
  const score = await t.evaluate(testSet.images, testSet.labels);
  console.log(
    `# train node (${engine.build}, worker): mnist-fc 1 epoch on 6,000 images: ${e.seconds.toFixed(2)} s/epoch, ` +
      `train loss ${e.train.loss.toFixed(4)}, validation ${(e.validation.accuracy * 100).toFixed(2)} %, test ${(score.accuracy * 100).toFixed(2)} %`,
  );
  assert.ok(score.accuracy >= 0.9, `test accuracy ${score.accuracy}`);
  // The GGUF is ggml's MNIST layout: Mnist reads it with the same accuracy.
  const gguf = await t.toGGUF();
  const m = await Mnist.load(gguf);
  assert.equal(m.kind, 'fc');
  const ev = await m.evaluate(testSet.images, testSet.labels);
  assert.equal(ev.correct, Math.round(score.accuracy * 10000));
  m.free();
  // Resume from it: the same weights, and training goes on from them.
  const r2 = await Trainer.create({ resume: gguf, epochs: 1, batchSize: 32, engine: workerEngine });
  assert.deepEqual(await r2.toGGUF(), gguf);
  await r2.fit(idxData(640));
  assert.notDeepEqual(await r2.toGGUF(), gguf);
  await r2.dispose();
  await t.dispose();
});

test('Trainer (worker): stop, continue, abort', async () => {
  const t = await Trainer.create({ model: 'cnn', epochs: 2, batchSize: 16, engine: workerEngine });
  let seen = 0;
  const run = t.fit(idxData(400), { onStep: () => ++seen === 3 && t.stop(), sliceMs: 1 });
  // Busy while it runs: another call is rejected, not queued into the run.
  await assert.rejects(t.toGGUF(), codeIs('busy'));
  const r = await run;
  assert.equal(r.stopped, true);
  assert.ok(r.steps >= 3 && r.steps < 2 * 23, `${r.steps} steps`);
  // fit() without data continues the run to its end.
  const rest = await t.fit();
  assert.equal(rest.done, true);
  assert.equal(r.steps + rest.steps, 2 * Math.floor(380 / 16));
  const ac = new AbortController();
  const aborted = t.fit(idxData(400), { onStep: (s) => s.step === 1 && ac.abort(), signal: ac.signal, sliceMs: 1 });
  await assert.rejects(aborted, codeIs('aborted'));
  assert.ok((await t.toGGUF()).length > 0);
  await t.dispose();
});

test('Trainer: hostile options and data reject with codes; the trainer stays usable', async () => {
  const bad = async (opts, code) => assert.rejects(Trainer.create({ engine: workerEngine, ...opts }), codeIs(code));
  await bad({ model: 'rnn' }, 'invalid-argument');
  await bad({ batchSize: 48, physicalBatchSize: 32 }, 'invalid-argument');
  await bad({ batchSize: 0 }, 'invalid-argument');
  await bad({ epochs: -1 }, 'invalid-argument');
  await bad({ epochs: 1.5 }, 'invalid-argument');
  await bad({ lr: NaN }, 'invalid-argument');
  await bad({ lr: -1 }, 'invalid-argument');
  await bad({ beta1: 1 }, 'invalid-argument');
  await bad({ valSplit: 1 }, 'invalid-argument');
  await bad({ optimizer: 'lion' }, 'invalid-argument');
  await bad({ backend: 'webgpu' }, 'unsupported');
  await bad({ resume: new Uint8Array([1, 2, 3, 4]) }, 'bad-gguf');
  await bad({ resume: fs.readFileSync(asset('t10k-labels-idx1-ubyte.gz')) }, 'bad-gguf');
  // A valid GGUF of the wrong shape: the cnn file's tensors under an fc architecture are missing.
  const cnn = new Uint8Array(fs.readFileSync(asset('mnist-cnn-f32.gguf')));
  const at = Buffer.from(cnn).indexOf('mnist-cnn');
  cnn.set(new TextEncoder().encode('mnist-fc\0'.slice(0, 9)), at);
  await bad({ resume: cnn }, 'bad-model');

  const t = await Trainer.create({ epochs: 1, batchSize: 16, engine: workerEngine });
  await assert.rejects(t.fit(), codeIs('invalid-argument')); // no data
  const img = new Float32Array(64 * 784).fill(0.5);
  const lab = Uint8Array.from({ length: 64 }, (_, i) => i % 10);
  await assert.rejects(t.setData({ images: img, labels: lab.subarray(0, 63) }), codeIs('shape'));
  await assert.rejects(t.setData({ images: img.subarray(1), labels: lab }), codeIs('shape'));
  await assert.rejects(t.setData({ images: img, labels: Uint8Array.from(lab, (l, i) => (i === 9 ? 10 : l)) }), codeIs('invalid-argument'));
  await assert.rejects(t.setData({ images: [1, 2, 3], labels: lab }), codeIs('invalid-argument'));
  await assert.rejects(t.setData({ images: img.subarray(0, 8 * 784), labels: lab.subarray(0, 8) }), codeIs('invalid-argument')); // < one batch
  await assert.rejects(t.setData({ imagesIdx: new Uint8Array(16), labelsIdx: new Uint8Array(8) }), codeIs('invalid-argument'));
  await assert.rejects(t.setData({ imagesIdx: trainImagesIdx.subarray(0, 5000), labelsIdx: trainLabelsIdx }), codeIs('invalid-argument'));
  await assert.rejects(t.setData({ imagesIdx: new Uint8Array(trainImagesIdx), labelsIdx: new Uint8Array(trainLabelsIdx), limit: -3 }), codeIs('invalid-argument'));
  await assert.rejects(t.setData(null), codeIs('invalid-argument'));
  await assert.rejects(t.evaluate(img, lab.subarray(0, 5)), codeIs('shape'));
  // Still usable: it trains on good data, and the model it saves classifies.
  assert.deepEqual(await t.setData({ images: img, labels: lab }), { stepsPerEpoch: Math.floor(61 / 16) });
  const r = await t.fit();
  assert.equal(r.done, true);
  const m = await Mnist.load(await t.toGGUF());
  assert.equal((await m.logits(img.subarray(0, 784))).length, 10);
  m.free();
  await t.dispose();
  await assert.rejects(t.toGGUF(), codeIs('invalid-argument')); // disposed
});

test('LocalTrainer runs on the calling thread', async () => {
  const t = await LocalTrainer.create({ epochs: 1, batchSize: 50, valSplit: 0 });
  const r = await t.fit({ imagesIdx: new Uint8Array(trainImagesIdx), labelsIdx: new Uint8Array(trainLabelsIdx), limit: 500 });
  assert.equal(r.steps, 10);
  assert.equal(r.epochs[0].validation.images, 0);
  assert.ok(t.info.graphBytes > 0);
  assert.equal(t.backendInfo.backend, 'cpu');
  // The async entry points (what WebGPU trainers use) give what the sync ones give on the CPU.
  assert.deepEqual(await t.toGGUFAsync(), t.toGGUF());
  const x = testSet.images.subarray(0, 200 * 784), y = testSet.labels.subarray(0, 200);
  assert.deepEqual(await t.evaluateAsync(x, y), t.evaluate(x, y));
  // On the CPU an async call never waits inside, so two at once both complete (on WebGPU the
  // second is rejected as busy: train-e2e.mjs).
  const [g2, e2] = await Promise.all([t.toGGUFAsync(), t.evaluateAsync(x, y)]);
  assert.deepEqual([g2, e2], [t.toGGUF(), t.evaluate(x, y)]);
  await assert.rejects(t.evaluateAsync(x, y.subarray(1)), codeIs('shape'));
  const r2 = await t.fit({ imagesIdx: new Uint8Array(trainImagesIdx), labelsIdx: new Uint8Array(trainLabelsIdx), limit: 500 });
  assert.equal(r2.steps, 10);
  t.dispose();
});

test('Trainer backends in Node (no WebGPU): webgpu rejects with a code, auto trains on the CPU', async () => {
  await assert.rejects(LocalTrainer.create({ backend: 'webgpu' }), (e) => e.code === 'unsupported' && /webgpu/i.test(e.message));
  await assert.rejects(Trainer.create({ backend: 'webgpu', engine: workerEngine }), codeIs('unsupported'));
  await assert.rejects(Trainer.create({ backend: 'tpu', engine: workerEngine }), codeIs('invalid-argument'));
  const t = await Trainer.create({ backend: 'auto', epochs: 1, batchSize: 50, engine: workerEngine });
  assert.equal(t.backendInfo.backend, 'cpu');
  assert.equal(t.backendInfo.requested, 'auto');
  assert.match(t.backendInfo.reason, /no WebGPU/);
  const r = await t.fit(idxData(300));
  assert.equal(r.steps, Math.floor(285 / 50));
  await t.dispose();
});
