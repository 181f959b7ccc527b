// The chat demo: LLM.loadInWorker (the page never blocks), streaming pieces, stats, stop.
import { init, LLM } from '../dist/index.js';

const $ = (id) => document.getElementById(id);
const state = (window.__chat = { ready: false, error: null, loadInfo: null, replies: [], stats: null, memory: null, generating: false });
const MiB = (n) => (n / 2 ** 20).toFixed(1) + ' MiB';

const e = await init();
$('engine').textContent = `ggweb ${e.version} · ${e.relaxed ? 'wasm relaxed SIMD' : e.simd ? 'wasm SIMD128' : 'wasm scalar'}`;

const params = new URLSearchParams(location.search);
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

async function load() {
  $('load').disabled = true;
  $('loadstatus').textContent = 'loading…';
  try {
    llm?.free();
    llm = await LLM.loadInWorker($('url').value, {
      nCtx: 2048,
      backend: $('backend').value,
      onProgress: (p) => {
        if (p.total) $('progress').value = p.loaded / p.total;
        $('loadstatus').textContent = `${p.fromCache ? 'from cache' : 'downloading'}: ${MiB(p.loaded)}${p.total ? ' of ' + MiB(p.total) : ''}`;
      },
    });
    const i = llm.info, l = llm.loadInfo;
    state.loadInfo = l;
    $('progress').value = 1;
    $('loadstatus').textContent = `${i.name ?? i.architecture}: ${(i.nParams / 1e6).toFixed(0)}M parameters, ${i.nLayer} layers, context ${i.nCtx} · loaded in ${l.seconds.toFixed(2)} s${l.fromCache ? ' from the Cache API' : ''} · ${l.backend} (${l.kernels})`;
    $('loadstatus').title = l.backendInfo.reason;
    for (const id of ['prompt', 'send', 'newchat']) $(id).disabled = false;
    state.ready = true;
    await showMemory();
    $('prompt').focus();
  } catch (err) {
    state.error = err.message;
    $('loadstatus').textContent = `error: ${err.message}`;
  } finally {
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

$('load').onclick = load;
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
load();
