import { init, Trainer, Mnist, loadMnistSet, preprocessDigit, imageDataToGray } from '../dist/index.js';

const $ = (id) => document.getElementById(id);
// What the end-to-end test reads (www/test-e2e/train-e2e.mjs).
const state = (window.__train = { ready: false, training: false, done: false, steps: 0, epochs: [], test: null, error: null, prediction: null, info: null });
const params = new URLSearchParams(location.search);
for (const [k, id] of [['model', 'model'], ['n', 'count'], ['epochs', 'epochs'], ['batch', 'batch'], ['lr', 'lr'], ['build', 'build'], ['backend', 'backend']]) {
  if (params.has(k)) $(id).value = params.get(k);
}
const ENGINES = { auto: { threads: false }, simd: { threads: false, relaxed: false }, scalar: { threads: false, simd: false } };

function fail(e) {
  state.error = String(e?.message || e);
  state.training = false;
  $('status').innerHTML = `<span class="err">${state.error}${e?.code ? ` (${e.code})` : ''}</span>`;
  $('train').disabled = false;
  $('stop').disabled = true;
}

// ---- data: the idx files next to the demo (scripts/build-web.sh copies them into assets/) ----
let trainIdx = null, testSet = null;
async function fetchBytes(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status} (run scripts/build-web.sh: it copies the MNIST files into www/demo/assets)`);
  return new Uint8Array(await r.arrayBuffer());
}
try {
  const e = await init(ENGINES.auto);
  $('engine').textContent = `ggweb ${e.version} · ${e.relaxed ? 'wasm relaxed SIMD' : e.simd ? 'wasm SIMD128' : 'wasm scalar'}`;
  const [images, labels, test] = await Promise.all([
    fetchBytes('assets/train-images-idx3-ubyte.gz'),
    fetchBytes('assets/train-labels-idx1-ubyte.gz'),
    loadMnistSet('assets/t10k-images-idx3-ubyte.gz', 'assets/t10k-labels-idx1-ubyte.gz'),
  ]);
  trainIdx = { images, labels };
  testSet = test;
  $('status').textContent = 'ready: 60,000 training and 10,000 test images loaded';
  state.ready = true;
} catch (e) {
  fail(e);
}

// ---- the plot: loss per step (left axis, autoscaled), accuracies in [0, 1] (right) ----
const plot = $('plot');
const pctx = plot.getContext('2d');
let series = { loss: [], acc: [], val: [] };
let totalSteps = 1;
function draw() {
  const W = plot.width, H = plot.height, pad = 30;
  pctx.clearRect(0, 0, W, H);
  pctx.strokeStyle = '#2a2f3a';
  pctx.fillStyle = '#9aa3b2';
  pctx.font = '11px system-ui';
  for (let i = 0; i <= 4; i++) {
    const y = pad / 2 + ((H - pad) * i) / 4;
    pctx.beginPath(); pctx.moveTo(pad, y); pctx.lineTo(W - pad, y); pctx.stroke();
    pctx.fillText(`${100 - 25 * i}%`, W - pad + 4, y + 4);
  }
  const maxLoss = Math.max(0.5, ...series.loss.slice(0, 5), ...series.loss.slice(-50));
  pctx.fillText(maxLoss.toFixed(2), 2, pad / 2 + 4);
  pctx.fillText('0', 2, H - pad / 2 + 4);
  const x = (i) => pad + ((W - 2 * pad) * i) / Math.max(1, totalSteps - 1);
  const yLoss = (v) => pad / 2 + (H - pad) * (1 - Math.min(v, maxLoss) / maxLoss);
  const yAcc = (v) => pad / 2 + (H - pad) * (1 - v);
  const line = (data, y, color) => {
    pctx.strokeStyle = color;
    pctx.lineWidth = 1.5;
    pctx.beginPath();
    data.forEach((v, i) => (i ? pctx.lineTo(x(i), y(v)) : pctx.moveTo(x(i), y(v))));
    pctx.stroke();
  };
  // Batch accuracy is noisy at batch 32: a running mean over 10 steps.
  const smooth = series.acc.map((_, i, a) => { const s = a.slice(Math.max(0, i - 9), i + 1); return s.reduce((p, q) => p + q, 0) / s.length; });
  line(smooth, yAcc, '#4cc38a');
  line(series.loss, yLoss, '#6ea8fe');
  pctx.fillStyle = '#9b7bff';
  for (const [step, v] of series.val) { pctx.beginPath(); pctx.arc(x(step), yAcc(v), 4, 0, 2 * Math.PI); pctx.fill(); }
}
draw();
let drawQueued = false;
const redraw = () => { if (!drawQueued) { drawQueued = true; requestAnimationFrame(() => { drawQueued = false; draw(); }); } };

// ---- training ----
let trainer = null, model = null, gguf = null;
$('train').addEventListener('click', async () => {
  if (!state.ready || state.training) return;
  state.training = true; state.done = false; state.error = null; state.steps = 0; state.epochs = []; state.test = null;
  $('train').disabled = true; $('download').disabled = true; $('stop').disabled = false;
  series = { loss: [], acc: [], val: [] };
  const n = Number($('count').value), epochs = Number($('epochs').value);
  try {
    await trainer?.dispose();
    model?.free();
    model = null;
    $('status').textContent = 'starting the worker…';
    trainer = await Trainer.create({
      model: $('model').value, epochs, batchSize: Number($('batch').value), lr: Number($('lr').value), engine: ENGINES[$('build').value],
      backend: $('backend').value,
      // ?pbatch=N: images per graph evaluation (default: the whole batch; www/bench/train.mjs sets ggml's 500).
      physicalBatchSize: params.has('pbatch') ? Number(params.get('pbatch')) : undefined,
    });
    state.info = trainer.info;
    const spe = Math.floor((n - Math.floor(n * 0.05)) / Number($('batch').value));
    totalSteps = spe * epochs;
    $('progress').max = totalSteps;
    const bi = trainer.info.backend;
    const where = bi.backend === 'webgpu' ? `WebGPU (${bi.adapter?.name ?? '?'}, ${bi.f16 ? 'f16' : 'f32'} path)` : `the CPU (${bi.reason})`;
    $('status').textContent = `training ${trainer.info.model} in a worker on ${where} (${trainer.info.build} build, graph ${(trainer.info.graphBytes / 2 ** 20).toFixed(1)} MiB)…`;
    const r = await trainer.fit(
      { imagesIdx: trainIdx.images.slice(), labelsIdx: trainIdx.labels.slice(), limit: n },
      {
        onStep: (s) => {
          state.steps++;
          series.loss.push(s.loss);
          series.acc.push(s.accuracy);
          $('progress').value = state.steps;
          $('where').textContent = `${s.epoch + 1} · ${s.step + 1}/${s.stepsPerEpoch}`;
          $('loss').textContent = s.loss.toFixed(3);
          redraw();
        },
        onEpoch: (e) => {
          state.epochs.push(e);
          series.val.push([state.steps - 1, e.validation.accuracy]);
          $('val').textContent = `${(e.validation.accuracy * 100).toFixed(2)}%`;
          $('timing').textContent = state.epochs.map((x) => `epoch ${x.epoch + 1}: ${x.seconds.toFixed(2)} s`).join(' · ');
          redraw();
        },
      },
    );
    $('status').textContent = r.stopped ? 'stopped — evaluating the model so far…' : 'trained — evaluating on the 10,000 test images…';
    state.test = await trainer.evaluate(testSet.images, testSet.labels);
    $('test').textContent = `${(state.test.accuracy * 100).toFixed(2)}%`;
    gguf = await trainer.toGGUF();
    model = await Mnist.load(gguf);
    $('download').disabled = false;
    $('padStatus').textContent = 'draw a digit: the model you just trained classifies it';
    $('status').innerHTML = `<span class="ok">${r.stopped ? 'stopped' : 'done'}</span>: ${r.steps} steps in ${r.seconds.toFixed(1)} s, test accuracy ${(state.test.accuracy * 100).toFixed(2)}%`;
    state.done = true;
    classify();
  } catch (e) {
    fail(e);
  } finally {
    state.training = false;
    $('train').disabled = false;
    $('stop').disabled = true;
  }
});
$('stop').addEventListener('click', () => trainer?.stop());
$('download').addEventListener('click', () => {
  if (!gguf) return;
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([gguf], { type: 'application/octet-stream' }));
  a.download = `mnist-${trainer?.info.model ?? 'fc'}-trained.gguf`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
});

// ---- drawing with the trained model ----
const pad = $('pad');
const ctx = pad.getContext('2d', { willReadFrequently: true });
const preview = $('preview').getContext('2d');
const bars = [];
for (let d = 0; d < 10; d++) {
  const el = document.createElement('div');
  el.className = 'bar';
  el.innerHTML = `<b>${d}</b><div class="track"><div class="fill"></div></div><span class="muted">0%</span>`;
  $('bars').append(el);
  bars.push(el);
}
function clearPad() {
  ctx.fillStyle = '#000';
  ctx.fillRect(0, 0, pad.width, pad.height);
  preview.clearRect(0, 0, 28, 28);
  $('prediction').textContent = '–';
  state.prediction = null;
}
clearPad();
$('clear').addEventListener('click', clearPad);
let drawing = false, last = null;
const pos = (e) => { const r = pad.getBoundingClientRect(); return [((e.clientX - r.left) * pad.width) / r.width, ((e.clientY - r.top) * pad.height) / r.height]; };
function stroke(a, b) {
  ctx.strokeStyle = '#fff'; ctx.lineWidth = 20; ctx.lineCap = 'round'; ctx.lineJoin = 'round';
  ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
}
pad.addEventListener('pointerdown', (e) => { drawing = true; pad.setPointerCapture(e.pointerId); last = pos(e); stroke(last, last); classify(); });
pad.addEventListener('pointermove', (e) => { if (!drawing) return; const p = pos(e); stroke(last, p); last = p; classify(); });
for (const ev of ['pointerup', 'pointercancel']) pad.addEventListener(ev, () => { drawing = false; classify(); });

let queued = false;
function classify() {
  if (queued) return;
  queued = true;
  requestAnimationFrame(async () => {
    queued = false;
    const x = preprocessDigit(imageDataToGray(ctx.getImageData(0, 0, pad.width, pad.height)), pad.width, pad.height);
    const img = preview.createImageData(28, 28);
    for (let i = 0; i < 784; i++) { const v = Math.round(x[i] * 255); img.data.set([v, v, v, 255], 4 * i); }
    preview.putImageData(img, 0, 0);
    if (!model || !x.some((v) => v > 0)) return;
    const { label, probabilities } = await model.predict(x);
    state.prediction = { label, probabilities: Array.from(probabilities) };
    $('prediction').textContent = String(label);
    $('confidence').textContent = `${(probabilities[label] * 100).toFixed(1)}% · the model trained here`;
    bars.forEach((b, d) => {
      const p = probabilities[d] * 100;
      b.classList.toggle('top', d === label);
      b.querySelector('.fill').style.width = `${p}%`;
      b.querySelector('span').textContent = `${p.toFixed(p < 10 ? 1 : 0)}%`;
    });
  });
}

if (params.get('autostart') === '1') {
  const go = () => (state.ready ? $('train').click() : setTimeout(go, 50));
  go();
}
