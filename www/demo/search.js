// The semantic-search demo: Embedder.load, embed the sentences once (again when they change),
// embed each query and rank by cosine similarity.
import { init, Embedder, rankBySimilarity } from '../dist/index.js';

const $ = (id) => document.getElementById(id);
const state = (window.__search = { ready: false, error: null, results: null });
const MiB = (n) => (n / 2 ** 20).toFixed(1) + ' MiB';

const e = await init();
$('engine').textContent = `ggweb ${e.version} · ${e.relaxed ? 'wasm relaxed SIMD' : e.simd ? 'wasm SIMD128' : 'wasm scalar'}`;

let model = null;
let docs = { text: null, lines: [], vectors: [] };

async function load() {
  $('load').disabled = true;
  try {
    model?.dispose();
    model = await Embedder.load($('url').value, {
      onProgress: (p) => {
        if (p.total) $('progress').value = p.loaded / p.total;
        $('loadstatus').textContent = `${p.fromCache ? 'from cache' : 'downloading'}: ${MiB(p.loaded)}${p.total ? ' of ' + MiB(p.total) : ''}`;
      },
    });
    $('progress').value = 1;
    $('loadstatus').textContent = `loaded: ${model.info.nEmbd}-d vectors, ${model.info.pooling} pooling · ${model.info.backendReport}`;
    $('query').disabled = $('search').disabled = false;
    state.ready = true;
    await search();
  } catch (err) {
    state.error = String(err.message ?? err);
    $('loadstatus').textContent = `error: ${state.error}`;
  } finally {
    $('load').disabled = false;
  }
}

async function search() {
  if (!model) return;
  const t0 = performance.now();
  const text = $('docs').value;
  if (text !== docs.text) {
    const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
    docs = { text, lines, vectors: await model.embed(lines) };
  }
  const [q] = await model.embed($('query').value);
  const ranked = rankBySimilarity(q, docs.vectors);
  const ms = performance.now() - t0;
  $('stats').textContent = `${docs.lines.length} sentences · ${ms.toFixed(0)} ms`;
  const ol = $('results');
  ol.replaceChildren();
  for (const { index, score } of ranked) {
    const li = document.createElement('li');
    const s = document.createElement('span');
    s.className = 'score';
    s.textContent = score.toFixed(3);
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${Math.max(0, score) * 200}px`;
    const t = document.createElement('span');
    t.textContent = docs.lines[index];
    li.append(s, bar, t);
    ol.append(li);
  }
  state.results = ranked.map(({ index, score }) => ({ text: docs.lines[index], score }));
}

$('load').onclick = load;
$('form').onsubmit = (ev) => {
  ev.preventDefault();
  search().catch((err) => ($('stats').textContent = `error: ${err.message ?? err}`));
};
if (new URLSearchParams(location.search).has('autoload')) load();
