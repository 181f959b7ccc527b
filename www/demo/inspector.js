import { init, inspectGGUF } from '../dist/index.js';

const $ = (id) => document.getElementById(id);
const state = (window.__inspector = { header: null, error: null, bytesRead: 0 });
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const bytes = (n) => {
  if (n === undefined) return '?';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
};

init().then((e) => ($('engine').textContent = `ggweb ${e.version} · ${e.relaxed ? 'wasm relaxed SIMD' : e.simd ? 'wasm SIMD128' : 'wasm scalar'}`));

let controller = null;
async function open(source, label) {
  controller?.abort();
  controller = new AbortController();
  state.header = null;
  state.error = null;
  $('status').textContent = `reading ${label}…`;
  let read = 0;
  try {
    const h = await inspectGGUF(source, {
      signal: controller.signal,
      onProgress: (p) => { read = p.loaded; },
    });
    state.header = h;
    state.bytesRead = read;
    $('status').innerHTML = `<span class="ok">${esc(label)}</span>: header parsed from ${bytes(read)}` +
      (h.fileSize ? ` of ${bytes(h.fileSize)} (${((100 * read) / h.fileSize).toFixed(read < h.fileSize ? 2 : 0)}%)` : '');
    render(h);
  } catch (e) {
    if (e.name === 'AbortError') return;
    state.error = e.message;
    $('status').innerHTML = `<span class="err">${esc(e.message)}</span>`;
    $('result').hidden = true;
  }
}

function fmtValue(v) {
  if (Array.isArray(v)) {
    const head = v.slice(0, 12).map(fmtValue).join(', ');
    return `[${head}${v.length > 12 ? `, … <span class="muted">(${v.length.toLocaleString()} items)</span>` : ''}]`;
  }
  if (typeof v === 'string') return `<code>${esc(v.length > 300 ? v.slice(0, 300) + '…' : v)}</code>`;
  if (typeof v === 'bigint') return `<code>${v}n</code>`;
  return `<code>${esc(v)}</code>`;
}

let rows = [];
let sortKey = 'index', asc = true;
function render(h) {
  $('result').hidden = false;
  const total = h.tensors.reduce((a, t) => a + t.byteSize, 0);
  const params = h.tensors.reduce((a, t) => a + t.nElements, 0);
  const types = {};
  for (const t of h.tensors) types[t.type] = (types[t.type] || 0) + 1;
  const stat = (k, v) => `<div class="stat"><div class="k">${k}</div><div class="v">${v}</div></div>`;
  $('summary').innerHTML =
    stat('architecture', esc(h.architecture ?? '—')) + stat('GGUF version', h.version) +
    stat('parameters', params.toLocaleString()) + stat('tensor data', bytes(total)) +
    stat('types', Object.entries(types).map(([t, n]) => `${t}×${n}`).join(' ') || '—');
  const meta = Object.entries(h.metadata);
  $('nkv').textContent = meta.length;
  $('meta').tBodies[0].innerHTML = meta
    .map(([k, v]) => `<tr><td class="mono">${esc(k)}</td><td><span class="pill">${esc(h.metadataTypes[k])}</span></td><td>${fmtValue(v)}</td></tr>`)
    .join('');
  rows = h.tensors.map((t, index) => ({ ...t, index }));
  $('ntensors').textContent = rows.length;
  renderTensors();
}

function renderTensors() {
  const f = $('filter').value.trim().toLowerCase();
  const list = rows.filter((t) => !f || t.name.toLowerCase().includes(f) || t.type.toLowerCase() === f || t.type.toLowerCase().includes(f));
  const key = (t) => (sortKey === 'shape' ? t.nElements : t[sortKey]);
  list.sort((a, b) => {
    const x = key(a), y = key(b);
    const c = typeof x === 'string' ? x.localeCompare(y) : x - y;
    return asc ? c : -c;
  });
  $('tensors').tBodies[0].innerHTML = list
    .map((t) => `<tr><td class="num">${t.index}</td><td class="mono">${esc(t.name)}</td><td><span class="pill">${t.type}</span></td>` +
      `<td class="mono">[${t.shape.join(', ')}]</td><td class="num">${t.nElements.toLocaleString()}</td>` +
      `<td class="num">${bytes(t.byteSize)}</td><td class="num mono">0x${t.offset.toString(16)}</td></tr>`)
    .join('');
  for (const th of $('tensors').tHead.rows[0].cells) {
    th.classList.toggle('sorted', th.dataset.k === sortKey);
    th.classList.toggle('asc', th.dataset.k === sortKey && asc);
  }
  state.visibleTensors = list.map((t) => t.name);
}

for (const th of $('tensors').tHead.rows[0].cells) {
  th.addEventListener('click', () => {
    if (sortKey === th.dataset.k) asc = !asc;
    else { sortKey = th.dataset.k; asc = true; }
    renderTensors();
  });
}
$('filter').addEventListener('input', renderTensors);
$('file').addEventListener('change', (e) => {
  const f = e.target.files[0];
  if (f) open(f, f.name);
});
$('open').addEventListener('click', () => {
  const u = $('url').value.trim();
  if (u) open(new URL(u, location.href), u);
});
const drop = $('drop');
drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  const f = e.dataTransfer.files[0];
  if (f) open(f, f.name);
});
