import { init, Mnist, preprocessDigit, imageDataToGray } from '../dist/index.js';

const $ = (id) => document.getElementById(id);
const pad = $('pad');
const ctx = pad.getContext('2d', { willReadFrequently: true });
const preview = $('preview').getContext('2d');
// `drawn` counts strokes: a prediction carries the count it was computed for, and results of older
// drawings (WebGPU predictions are async and can finish after newer strokes) are dropped.
const state = (window.__mnist = { ready: false, prediction: null, evaluation: null, error: null, drawn: 0 });

// ---- bars ----
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
  $('confidence').textContent = 'draw a digit';
  for (const b of bars) {
    b.classList.remove('top');
    b.querySelector('.fill').style.width = '0';
    b.querySelector('span').textContent = '0%';
  }
  state.prediction = null;
  state.drawn++;
}
clearPad();

// ---- models ----
const models = {};
let kind = 'fc';
let engineLine = '';

/** One line on where the models run and why (Mnist.backendInfo). */
function describe(info) {
  if (info.backend === 'webgpu') {
    const a = info.adapter;
    const cpuOps = info.placements?.elsewhere?.length ?? 0;
    return `WebGPU: ${a.name} (${a.f16 ? 'f16' : 'f32'} path${a.shaderF16 ? '' : ', no shader-f16'}; max storage binding ${Math.round(a.maxStorageBufferBindingSize / 2 ** 20)} MiB)` +
      (info.placements ? ` · ${cpuOps ? `${cpuOps} op(s) on the CPU: ${info.placements.elsewhere.join('; ')}` : 'every op on WebGPU'}` : '');
  }
  return `CPU (wasm) — ${info.reason}`;
}

async function loadModels() {
  const backend = $('backend').value;
  state.ready = false;
  state.error = null;
  $('status').textContent = `loading models (${backend})…`;
  try {
    const [fc, cnn] = await Promise.all([
      Mnist.load('assets/mnist-fc-f32.gguf', { backend }),
      Mnist.load('assets/mnist-cnn-f32.gguf', { backend }),
    ]);
    for (const m of Object.values(models)) m.free();
    Object.assign(models, { fc, cnn });
    state.backendInfo = fc.backendInfo;
    $('backendInfo').textContent = describe(fc.backendInfo);
    $('engine').textContent = `${engineLine} · ${fc.backendInfo.backend === 'webgpu' ? 'WebGPU' : 'CPU'}`;
    $('status').textContent = 'models ready';
    state.ready = true;
    // Re-classify a drawing made before a backend switch (classify is hoisted; schedule is not yet).
    requestAnimationFrame(() => classify());
  } catch (e) {
    state.error = String(e.message || e);
    $('status').innerHTML = `<span class="err">${state.error}</span>`;
    $('backendInfo').textContent = '–';
  }
}

try {
  const engine = await init();
  engineLine = `ggweb ${engine.version} · ${engine.relaxed ? 'wasm relaxed SIMD' : engine.simd ? 'wasm SIMD128' : 'wasm scalar'}`;
  $('engine').textContent = engineLine;
  await loadModels();
} catch (e) {
  state.error = String(e.message || e);
  $('status').innerHTML = `<span class="err">${state.error}</span>`;
}
$('backend').addEventListener('change', loadModels);

for (const r of document.querySelectorAll('input[name=model]')) {
  r.addEventListener('change', () => {
    kind = r.value;
    schedule();
  });
}

// ---- drawing ----
let drawing = false;
let last = null;
function pos(e) {
  const r = pad.getBoundingClientRect();
  return [((e.clientX - r.left) * pad.width) / r.width, ((e.clientY - r.top) * pad.height) / r.height];
}
function stroke(from, to) {
  state.drawn++;
  ctx.strokeStyle = '#fff';
  ctx.fillStyle = '#fff';
  ctx.lineWidth = 20;
  ctx.lineCap = 'round';
  ctx.lineJoin = 'round';
  ctx.beginPath();
  ctx.moveTo(from[0], from[1]);
  ctx.lineTo(to[0], to[1]);
  ctx.stroke();
}
pad.addEventListener('pointerdown', (e) => {
  drawing = true;
  pad.setPointerCapture(e.pointerId);
  last = pos(e);
  stroke(last, last);
  schedule();
});
pad.addEventListener('pointermove', (e) => {
  if (!drawing) return;
  const p = pos(e);
  stroke(last, p);
  last = p;
  schedule();
});
for (const ev of ['pointerup', 'pointercancel']) {
  pad.addEventListener(ev, () => {
    drawing = false;
    schedule();
  });
}
$('clear').addEventListener('click', clearPad);

let pending = false;
function schedule() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    classify();
  });
}

async function classify() {
  const model = models[kind];
  if (!model) return;
  const gray = imageDataToGray(ctx.getImageData(0, 0, pad.width, pad.height));
  const x = preprocessDigit(gray, pad.width, pad.height);
  const img = preview.createImageData(28, 28);
  for (let i = 0; i < 784; i++) {
    const v = Math.round(x[i] * 255);
    img.data.set([v, v, v, 255], 4 * i);
  }
  preview.putImageData(img, 0, 0);
  if (!x.some((v) => v > 0)) return;
  const version = state.drawn;
  try {
    const { label, probabilities } = await model.predict(x);
    if (version !== state.drawn || model !== models[kind]) return; // a newer drawing or model
    if (model.backendInfo.placements) $('backendInfo').textContent = describe(model.backendInfo);
    state.prediction = { label, probabilities: Array.from(probabilities), kind, version };
    $('prediction').textContent = String(label);
    $('confidence').textContent = `${(probabilities[label] * 100).toFixed(1)}% · ${kind === 'fc' ? 'fully connected' : 'convolutional'}`;
    bars.forEach((b, d) => {
      const p = probabilities[d] * 100;
      b.classList.toggle('top', d === label);
      b.querySelector('.fill').style.width = `${p}%`;
      b.querySelector('span').textContent = `${p.toFixed(p < 10 ? 1 : 0)}%`;
    });
  } catch (e) {
    $('status').innerHTML = `<span class="err">${e.message}</span>`;
  }
}

// ---- test-set evaluation in a worker ----
let worker = null;
$('evaluate').addEventListener('click', () => {
  if (worker) return;
  const build = $('build').value;
  $('evaluate').disabled = true;
  $('evalStatus').textContent = 'loading the test set…';
  state.evaluation = null;
  worker = new Worker(new URL('./mnist-worker.js', import.meta.url), { type: 'module' });
  worker.onmessage = ({ data }) => {
    if (data.type === 'progress') {
      $('progress').value = data.done;
      $('progress').max = data.total;
      $('done').textContent = `${data.done.toLocaleString()} / ${data.total.toLocaleString()}`;
      $('accuracy').textContent = `${((data.correct / data.done) * 100).toFixed(2)}%`;
      $('evalStatus').textContent = `running ${data.kind} on ${data.engine}…`;
    } else if (data.type === 'result') {
      const r = data.result;
      state.evaluation = { ...r, kind: data.kind, engine: data.engine };
      $('accuracy').textContent = `${(r.accuracy * 100).toFixed(2)}%`;
      $('ips').textContent = Math.round(r.imagesPerSecond).toLocaleString();
      $('evalStatus').innerHTML = `<span class="ok">done</span>: ${r.correct.toLocaleString()} of ${r.total.toLocaleString()} correct with the ${data.kind} model on ${data.engine}, ${r.seconds.toFixed(2)} s of compute`;
      finish();
    } else if (data.type === 'error') {
      state.evaluation = { error: data.message };
      $('evalStatus').innerHTML = `<span class="err">${data.message}</span>`;
      finish();
    }
  };
  worker.onerror = (e) => {
    state.evaluation = { error: e.message };
    $('evalStatus').innerHTML = `<span class="err">${e.message}</span>`;
    finish();
  };
  worker.postMessage({ kind, build, backend: $('backend').value, base: new URL('./', location.href).href });
});
function finish() {
  worker?.terminate();
  worker = null;
  $('evaluate').disabled = false;
}
