// The chat demo: any supported GGUF from a URL or a local file (input or drag and drop). The
// header is read first (LLM.inspect: family, quantization, size, parameters; an unsupported
// family is refused with the reason before the weights are downloaded), then LLM.loadInWorker
// (the page never blocks), streaming pieces, stats, stop.
import { init, LLM } from '../dist/index.js';

const $ = (id) => document.getElementById(id);
const state = (window.__chat = { pageReady: false, ready: false, error: null, inspection: null, refused: null, info: null, loadInfo: null, replies: [], stats: null, memory: null, generating: false });
const MiB = (n) => (n / 2 ** 20).toFixed(1) + ' MiB';

const e = await init();
$('engine').textContent = `ggweb ${e.version} · ${e.relaxed ? 'wasm relaxed SIMD' : e.simd ? 'wasm SIMD128' : 'wasm scalar'}`;

const params = new URLSearchParams(location.search);
// ?model=URL preselects the model; ?autoload=0 waits for the user.
if (params.get('model')) $('url').value = params.get('model');
const MAX_TOKENS = Number(params.get('maxTokens') ?? 256);
// ?backend=cpu|auto|webgpu preselects the backend (default cpu).
if (params.get('backend')) $('backend').value = params.get('backend');
let llm = null;
let messages = [];
let current = null;

async function showMemory() {
  if (!llm) return;
  const m = await llm.memory();
  const pm = performance.memory;
  state.memory = { ...m, pageJsHeap: pm?.usedJSHeapSize };
  $('memory').textContent = `memory: wasm heap (worker) ${MiB(m.wasmHeap)} = weights ${MiB(m.weights)} + KV cache ${MiB(m.kvCache)} + compute ${MiB(m.compute)} + other` +
    (pm ? ` · page JS heap ${MiB(pm.usedJSHeapSize)}` : '');
}

const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

/** One line on the model from its header (before any weights are read). */
function describe(r) {
  const parts = [
    `<b>${esc(r.architecture ?? '?')}</b>${r.name ? ` · ${esc(r.name)}` : ''}`,
    `${esc(r.fileType ?? r.quant ?? '?')}${r.quant && r.fileType ? ` (${esc(r.quant)} weights)` : ''}`,
    r.fileSize ? MiB(r.fileSize) : null,
    `${(r.nParams / 1e6).toFixed(1)}M parameters`,
    r.contextLength ? `context ${r.contextLength}` : null,
    r.hasChatTemplate ? 'chat template' : 'no chat template',
  ];
  return parts.filter(Boolean).join(' · ') + ` <span class="muted">(header: ${MiB(r.bytesRead)})</span>`;
}

let loading = false;
async function load(source, label) {
  if (loading) return;
  loading = true;
  $('load').disabled = true;
  for (const id of ['prompt', 'send', 'newchat']) $(id).disabled = true;
  Object.assign(state, { ready: false, error: null, inspection: null, refused: null, info: null, loadInfo: null });
  $('progress').value = 0;
  $('model').textContent = `reading the header of ${label}…`;
  $('loadstatus').textContent = 'not loaded';
  try {
    current?.stop();
    llm?.free();
    llm = null;
    messages = [];
    $('log').textContent = '';
    const r = await LLM.inspect(source);
    state.inspection = r;
    if (!r.supported) {
      state.refused = r.reason;
      $('model').innerHTML = describe(r) + `<br><span class="err">refused: ${esc(r.reason)}</span> — the weights were not downloaded`;
      return;
    }
    $('model').innerHTML = describe(r);
    $('loadstatus').textContent = 'loading…';
    llm = await LLM.loadInWorker(source, {
      nCtx: 2048,
      backend: $('backend').value,
      onProgress: (p) => {
        if (p.total) $('progress').value = p.loaded / p.total;
        $('loadstatus').textContent = `${p.fromCache ? 'from cache' : 'reading'}: ${MiB(p.loaded)}${p.total ? ' of ' + MiB(p.total) : ''}`;
      },
    });
    const i = llm.info, l = llm.loadInfo;
    state.info = i;
    state.loadInfo = l;
    $('progress').value = 1;
    $('loadstatus').textContent = `${i.name ?? i.architecture}: ${(i.nParams / 1e6).toFixed(0)}M parameters, ${i.nLayer} layers, context ${i.nCtx} · chat format ${i.chatFormat} · loaded in ${l.seconds.toFixed(2)} s${l.fromCache ? ' from the Cache API' : ''} · ${l.backend} (${l.kernels})`;
    $('loadstatus').title = [l.backendInfo.reason, i.chatFormatNote].filter(Boolean).join('\n');
    for (const id of ['prompt', 'send', 'newchat']) $(id).disabled = false;
    state.ready = true;
    await showMemory();
    $('prompt').focus();
  } catch (err) {
    state.error = err.message;
    $('loadstatus').textContent = `error: ${err.message}`;
    if (!state.inspection) $('model').textContent = `error: ${err.message}`;
  } finally {
    loading = false;
    $('load').disabled = false;
  }
}

function bubble(role, text) {
  const d = document.createElement('div');
  d.className = `msg ${role}`;
  d.textContent = text;
  $('log').append(d);
  $('log').scrollTop = $('log').scrollHeight;
  return d;
}

async function send(text) {
  messages.push({ role: 'user', content: text });
  bubble('user', text);
  const out = bubble('assistant streaming', '');
  $('send').disabled = true;
  $('stop').disabled = false;
  state.generating = true;
  let reply = '';
  try {
    current = llm.chat(messages, { maxTokens: MAX_TOKENS, temperature: 0.2, topK: 40, topP: 0.95, repeatPenalty: 1.1 });
    for await (const piece of current) {
      reply += piece;
      out.textContent = reply;
      $('log').scrollTop = $('log').scrollHeight;
    }
    const r = current.result;
    state.stats = r.stats;
    $('stats').textContent = `prompt ${r.stats.promptEvaluated} tokens at ${r.stats.promptTokPerS.toFixed(1)} tok/s · generated ${r.stats.generatedTokens} tokens at ${r.stats.genTokPerS.toFixed(1)} tok/s · stop: ${r.stopReason}`;
  } catch (err) {
    state.error = err.message;
    out.textContent = reply + `\n[error: ${err.message}]`;
  } finally {
    out.classList.remove('streaming');
    messages.push({ role: 'assistant', content: reply });
    state.replies.push(reply);
    state.generating = false;
    current = null;
    $('send').disabled = false;
    $('stop').disabled = true;
    await showMemory();
  }
}

$('load').onclick = () => {
  const u = $('url').value.trim();
  if (u) load(new URL(u, location.href).href, u);
};
$('file').addEventListener('change', (e) => {
  const f = e.target.files[0];
  if (f) load(f, f.name);
});
const drop = $('source');
drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  const f = e.dataTransfer.files[0];
  if (f) load(f, f.name);
});
$('form').onsubmit = (ev) => {
  ev.preventDefault();
  const t = $('prompt').value.trim();
  if (!t || !llm || current) return;
  $('prompt').value = '';
  send(t);
};
$('stop').onclick = () => current?.stop();
$('newchat').onclick = async () => {
  current?.stop();
  messages = [];
  $('log').textContent = '';
  await llm?.reset();
};
state.pageReady = true;
if (params.get('autoload') !== '0') $('load').onclick();
