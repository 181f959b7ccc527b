// Browser tests of the LLM API (puppeteer-core driving /usr/bin/chromium, never a downloaded
// browser): SmolLM2 parity through the npm package in headless Chromium (tokens, last-position
// logits vs llama.cpp, greedy ids, errors), the chat page end to end (load with progress, send a
// message, streamed reply, stop, Cache API reload) with screenshots, and the single-thread
// benchmark (load s, prompt tok/s on a ~119-token prompt, generation tok/s, renderer peak memory).
// Writes test-output/llm-e2e.json and test-output/chat*.png. Exit code 0 on success.
// SmolLM2 on WebGPU (SwiftShader in headless Chromium: a CPU emulation of a GPU, f32 path) against
// the CPU build on a short prompt: logits, 2 greedy tokens, placements, and the same in a worker;
// weights streamed to the GPU (wasm heap <= 64 MiB + KV cache, logits equal to the keepFile
// path's) and a split model from Files on WebGPU and the CPU.
// Env: LLM_BENCH=0 skips the benchmark; NATIVE_GGWEB=path runs `ggweb generate --threads 1` beside it;
//      LLM_WEBGPU=0 skips the WebGPU part.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { SMOLLM2, REFERENCE, PROMPT, PROMPT_IDS, GREEDY_7, greedy7Matches, compareLogits, QWEN2, QWEN2_DATA, readF16 } from '../test/helpers.mjs';
import { splitGguf } from '../test/split-gguf.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = path.join(ROOT, 'test-output');
fs.mkdirSync(OUT, { recursive: true });
const CHROME = process.env.CHROME || '/usr/bin/chromium';
const BENCH = process.env.LLM_BENCH !== '0';
const MODEL_URL = '/models/' + path.basename(SMOLLM2);
// About 119 tokens (wllama's prompt length in ../shared/notes/browser-anchor.md).
const LONG_PROMPT =
  'The history of computing is a story of people who wanted to make machines think faster than they could. ' +
  'In the early days, engineers built enormous rooms full of vacuum tubes that consumed as much power as a small town, ' +
  'and a single mistake in the wiring could take weeks to find. Later, transistors replaced the tubes, and integrated ' +
  'circuits packed thousands of them onto a chip the size of a fingernail. Today a phone in your pocket is more powerful ' +
  'than all of the computers that sent astronauts to the moon. One morning, a young engineer named Lina opened her old laptop and discovered that';

process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;

const browser = await puppeteer.launch({
  executablePath: CHROME,
  headless: true,
  // The WebGPU part runs on SwiftShader (a CPU emulation): one evaluation can take minutes.
  protocolTimeout: 900000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage', '--enable-precise-memory-info',
    '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader'],
});
const results = {};
let failed = false;
const check = (cond, msg) => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!cond) failed = true;
};

/** Peak resident memory (VmHWM) of Chromium's renderer processes, MiB. */
function rendererPeakMiB() {
  const pids = fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  let best = 0;
  for (const pid of pids) {
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmd.includes('--type=renderer') || !cmd.includes(CHROME.split('/').pop())) continue;
      const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) best = Math.max(best, Number(m[1]) / 1024);
    } catch {}
  }
  return best;
}

try {
  const ref = Array.from(new Float32Array(fs.readFileSync(path.join(REFERENCE, 'logits_smollm2_t1.last.f32')).buffer.slice(0)));

  // ---- parity through the npm package, in the page ----
  let page = await browser.newPage();
  const logs = [];
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  await page.goto(`${base}/demo/`);
  const parity = await page.evaluate(async (url, prompt) => {
    const { LLM, clearModelCache } = await import('/dist/index.js');
    await clearModelCache();
    const llm = await LLM.load(url, { nCtx: 512 });
    const ids = await llm.tokenize(prompt);
    const logits = Array.from(await llm.logits(ids));
    llm.reset();
    const g = await llm.complete(prompt, { maxTokens: 7, temperature: 0 });
    const errors = [];
    for (const bad of [new Uint8Array(8), new TextEncoder().encode('GGUF\x03\x00\x00\x00\x05\x00\x00\x00')]) {
      try { await LLM.load(bad); errors.push(null); } catch (e) { errors.push(e instanceof Error ? e.message : 'not an Error'); }
    }
    try { await LLM.load('/models/missing.gguf', { cache: false }); errors.push(null); } catch (e) { errors.push(e.message); }
    const r = { ids, logits, tokens: g.tokens, text: g.text, errors, memory: llm.memory(), loadInfo: llm.loadInfo };
    llm.free();
    return r;
  }, MODEL_URL, PROMPT);
  check(JSON.stringify(parity.ids) === JSON.stringify(PROMPT_IDS), `chromium: tokenize ${JSON.stringify(parity.ids)}`);
  const c = compareLogits(parity.logits, ref);
  results.parity = { ...c, tokens: parity.tokens, text: parity.text, errors: parity.errors, memory: parity.memory };
  check(c.argmaxOurs === c.argmaxRef && c.maxAbs <= 1.0 && c.kl < 0.01,
    `chromium: logits argmax ${c.argmaxOurs}/${c.argmaxRef}, max abs ${c.maxAbs.toFixed(4)}, KL ${c.kl.toExponential(3)}`);
  check(greedy7Matches(parity.tokens), `chromium: greedy 7 ${JSON.stringify(parity.tokens)} "${parity.text}"`);
  check(parity.errors.every((e) => typeof e === 'string' && e.length > 0), `chromium: errors rejected: ${parity.errors.join(' | ')}`);
  check(parity.memory.wasmHeap < parity.memory.weights * 1.6 + parity.memory.kvCache + 64 * 2 ** 20,
    `chromium: wasm heap ${(parity.memory.wasmHeap / 2 ** 20).toFixed(1)} MiB for ${(parity.memory.weights / 2 ** 20).toFixed(1)} MiB of weights (one copy)`);
  await page.close();

  // ---- Qwen2.5-Coder-0.5B (qwen2) against llama.cpp (native-tests/data/qwen2), CPU build; then
  // WebGPU (SwiftShader) vs the CPU on 2 prompt tokens. A 491 MB model: scripts/test.sh --full
  // (GGWEB_TEST_FULL) or LLM_QWEN2=1 only; Node runs the CPU check by default (www/test-models).
  if (process.env.GGWEB_TEST_FULL || process.env.LLM_QWEN2 === '1') {
    const t0 = Date.now();
    const qref = JSON.parse(fs.readFileSync(path.join(QWEN2_DATA, 'logits.json'), 'utf8'));
    const qlast = readF16(fs.readFileSync(path.join(QWEN2_DATA, 'logits.last.f16')));
    const want = [];
    for (const [id, gap] of qref.greedy) {
      if (gap < 0.1) break;
      want.push(id);
    }
    page = await browser.newPage();
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    // Not cross-origin isolated: the single-thread build, which has WebGPU (the threads build has not).
    await page.goto(`${base}/demo/?coi=0`);
    const q = await page.evaluate(async (url, prompt, n) => {
      const { LLM } = await import('/dist/index.js');
      const llm = await LLM.load(url, { nCtx: 128, backend: 'cpu', cache: false });
      const ids = await llm.tokenize(prompt);
      const last = Array.from(await llm.logits(ids));
      const cpuMemory = llm.memory();
      const fileBytes = llm.info.fileBytes;
      llm.reset();
      const g = await llm.complete(ids, { maxTokens: n, temperature: 0 });
      llm.reset();
      const two = Array.from(await llm.logits(ids.slice(0, 2)));
      llm.free();
      const gpu = await LLM.load(url, { nCtx: 16, backend: 'webgpu', cache: false });
      const gtwo = Array.from(await gpu.logits(ids.slice(0, 2)));
      const r = { ids, last, tokens: g.tokens, text: g.text, two, gtwo, backendInfo: gpu.loadInfo.backendInfo, cpuMemory, fileBytes };
      gpu.free();
      return r;
    }, '/models/' + path.basename(QWEN2), qref.prompt, want.length);
    check(JSON.stringify(q.ids) === JSON.stringify(qref.prompt_ids), `chromium qwen2: prompt ids (${q.ids.length})`);
    const c = compareLogits(q.last, qlast);
    check(c.argmaxOurs === c.argmaxRef && c.kl < 0.01,
      `chromium qwen2: last logits argmax ${c.argmaxOurs}/${c.argmaxRef}, max abs ${c.maxAbs.toFixed(4)}, KL ${c.kl.toExponential(3)}`);
    check(JSON.stringify(q.tokens) === JSON.stringify(want), `chromium qwen2: greedy ${want.length} equal llama.cpp: "${q.text}"`);
    const cg = compareLogits(q.gtwo, q.two);
    check(q.backendInfo.backend === 'webgpu' && cg.argmaxOurs === cg.argmaxRef && cg.maxAbs <= 1.5 && cg.kl <= 0.01,
      `chromium qwen2: webgpu vs cpu (2 tokens): argmax ${cg.argmaxOurs}/${cg.argmaxRef}, max abs ${cg.maxAbs.toFixed(4)}, KL ${cg.kl.toExponential(3)}`);
    const qm = q.cpuMemory;
    check(qm.wasmHeap <= 1.2 * q.fileBytes + qm.kvCache,
      `chromium qwen2 cpu: wasm heap ${(qm.wasmHeap / 2 ** 20).toFixed(1)} MiB <= 1.2 x file ${(q.fileBytes / 2 ** 20).toFixed(1)} MiB + KV ${(qm.kvCache / 2 ** 20).toFixed(1)} MiB`);
    await page.close();
    // WebGPU in a fresh page (the heap's size is its peak): the weights streamed to the GPU.
    page = await browser.newPage();
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    await page.goto(`${base}/demo/?coi=0`);
    const qg = await page.evaluate(async (url, ids) => {
      const { LLM } = await import('/dist/index.js');
      const gpu = await LLM.load(url, { nCtx: 16, backend: 'webgpu', cache: false });
      const logits = Array.from(await gpu.logits(ids));
      const r = { logits, memory: gpu.memory(), report: gpu.loadInfo.backendInfo.reason };
      gpu.free();
      return r;
    }, '/models/' + path.basename(QWEN2), q.ids.slice(0, 2));
    const gm = qg.memory;
    check(gm.wasmHeap <= 64 * 2 ** 20 + gm.kvCache && JSON.stringify(qg.logits) === JSON.stringify(q.gtwo),
      `chromium qwen2 webgpu (streamed): wasm heap ${(gm.wasmHeap / 2 ** 20).toFixed(1)} MiB <= 64 MiB + KV ${(gm.kvCache / 2 ** 20).toFixed(1)} MiB; ` +
      `weights ${(gm.weightsGpu / 2 ** 20).toFixed(1)} MiB on the GPU, ${(gm.weightsHost / 2 ** 20).toFixed(1)} MiB in the heap; logits equal the first load's`);
    results.qwen2 = { compare: c, tokens: q.tokens, webgpu: cg, cpuMemory: qm, webgpuMemory: gm, seconds: (Date.now() - t0) / 1000 };
    console.log(`chromium qwen2 section: ${results.qwen2.seconds.toFixed(0)} s`);
    await page.close();
  }

  // ---- WebGPU (SwiftShader: CPU-emulated, slow) vs the CPU build, short prompt ----
  if (process.env.LLM_WEBGPU !== '0') {
    const t0 = Date.now();
    page = await browser.newPage();
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    // Not cross-origin isolated: the single-thread build, which has WebGPU (the threads build has not).
    await page.goto(`${base}/demo/?coi=0`);
    // 4 prompt tokens ("Once upon a time"), 2 generated: SwiftShader runs a 135M model at well
    // under 1 token/s (n > 1 slower still).
    const ids = PROMPT_IDS.slice(0, 4);
    const w = await page.evaluate(async (url, ids) => {
      const { LLM } = await import('/dist/index.js');
      const run = async (backend) => {
        const t0 = performance.now();
        const llm = await LLM.load(url, { nCtx: 64, backend });
        const t1 = performance.now();
        const logits = Array.from(await llm.logits(ids));
        const t2 = performance.now();
        // The prompt is cached: only its last token is evaluated again, then 2 generated.
        const g = await llm.complete(ids, { maxTokens: 2, temperature: 0 });
        llm.reset();
        const one = Array.from(await llm.logits(ids.slice(0, 1)));
        const r = { logits, one, tokens: g.tokens, stats: g.stats, loadInfo: llm.loadInfo, loadS: (t1 - t0) / 1000, logitsS: (t2 - t1) / 1000 };
        if (backend === 'webgpu') {
          // The synchronous engine calls are refused on WebGPU (typed error, not a trap).
          try { llm.memory(); r.memoryOk = true; } catch (e) { r.memoryOk = e.message; }
        }
        llm.free();
        return r;
      };
      const cpu = await run('cpu');
      const gpu = await run('webgpu');
      // The worker: same API, WebGPU inside the worker (one token, to keep it short).
      const t0 = performance.now();
      const wl = await LLM.loadInWorker(url, { nCtx: 64, backend: 'auto' });
      const wlogits = Array.from(await wl.logits(ids.slice(0, 1)));
      const worker = { logits: wlogits, loadInfo: wl.loadInfo, seconds: (performance.now() - t0) / 1000 };
      await wl.free();
      return { cpu, gpu, worker };
    }, MODEL_URL, ids);
    const c = compareLogits(w.gpu.logits, w.cpu.logits);
    const bi = w.gpu.loadInfo.backendInfo;
    results.webgpu = {
      compare: c, cpuTokens: w.cpu.tokens, gpuTokens: w.gpu.tokens, backendInfo: bi,
      cpuStats: w.cpu.stats, gpuStats: w.gpu.stats, gpuLoadS: w.gpu.loadS, gpuLogitsS: w.gpu.logitsS, cpuLogitsS: w.cpu.logitsS,
      worker: { compare: compareLogits(w.worker.logits, w.cpu.one), backendInfo: w.worker.loadInfo.backendInfo, seconds: w.worker.seconds },
      seconds: (Date.now() - t0) / 1000,
    };
    check(w.gpu.loadInfo.backend === 'webgpu' && bi.backend === 'webgpu' && bi.adapter?.name && /WebGPU: .*f32 path/.test(bi.reason),
      `webgpu: loadInfo ${w.gpu.loadInfo.backend}, "${bi.reason}"`);
    const nodes = bi.placements?.nodes ?? {};
    const gpuNodes = Object.entries(nodes).filter(([k]) => k !== 'CPU').reduce((a, [, n]) => a + n, 0);
    check(gpuNodes > 0 && (nodes.CPU ?? 0) <= (bi.placements?.elsewhere.length ?? 0),
      `webgpu: placements ${JSON.stringify(nodes)}, on the CPU: ${JSON.stringify(bi.placements?.elsewhere.slice(0, 3))}`);
    // Stated tolerances (f32 path vs the wasm CPU kernels, which quantize activations to q8_1 as
    // llama.cpp does): same argmax, max abs <= 1.5, KL <= 0.01 (native lavapipe: 1.04, 2.6e-3).
    check(c.argmaxOurs === c.argmaxRef && c.maxAbs <= 1.5 && c.kl <= 0.01,
      `webgpu vs cpu logits: argmax ${c.argmaxOurs}/${c.argmaxRef}, max abs ${c.maxAbs.toFixed(4)}, KL ${c.kl.toExponential(3)}`);
    check(JSON.stringify(w.gpu.tokens) === JSON.stringify(w.cpu.tokens), `webgpu: greedy 2 ${JSON.stringify(w.gpu.tokens)} vs cpu ${JSON.stringify(w.cpu.tokens)}`);
    check(w.gpu.memoryOk === true, `webgpu: memory() ${w.gpu.memoryOk}`);
    const c1 = compareLogits(w.gpu.one, w.cpu.one);
    check(c1.argmaxOurs === c1.argmaxRef && c1.maxAbs <= 1.5 && c1.kl <= 0.01,
      `webgpu vs cpu logits, 1 token (n = 1 kernels): max abs ${c1.maxAbs.toFixed(4)}, KL ${c1.kl.toExponential(3)}`);
    const wc = results.webgpu.worker.compare;
    check(w.worker.loadInfo.backend === 'webgpu' && wc.argmaxOurs === wc.argmaxRef && wc.maxAbs <= 1.5 && wc.kl <= 0.01,
      `webgpu in a worker (auto → ${w.worker.loadInfo.backend}): max abs ${wc.maxAbs.toFixed(4)}, KL ${wc.kl.toExponential(3)}`);
    console.log(`webgpu (SwiftShader, CPU emulation): load ${w.gpu.loadS.toFixed(1)} s, ${ids.length}-token prompt ${w.gpu.logitsS.toFixed(1)} s (cpu wasm ${w.cpu.logitsS.toFixed(2)} s), gen ${w.gpu.stats.genTokPerS.toFixed(3)} tok/s (cpu wasm ${w.cpu.stats.genTokPerS.toFixed(1)} tok/s); section ${results.webgpu.seconds.toFixed(0)} s`);
    await page.close();
  }

  // ---- WebGPU weight streaming, in a fresh page (the wasm heap never shrinks: its size is the
  // peak): the file's bytes go to GPU buffers as they arrive, so the heap stays <= 64 MiB + the KV
  // cache; the logits equal those of the path that keeps the file and uploads from it (the same
  // kernels), and a split model (3 parts as Files from an <input>) gives them too, on WebGPU and
  // on the CPU. One prompt token per evaluation (SwiftShader is slow).
  if (process.env.LLM_WEBGPU !== '0') {
    const t0 = Date.now();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ggweb-split-e2e-'));
    try {
      const parts = splitGguf(SMOLLM2, dir, 3, 'smollm2');
      page = await browser.newPage();
      page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
      await page.goto(`${base}/demo/?coi=0`);
      await page.evaluate(() => {
        const i = Object.assign(document.createElement('input'), { type: 'file', multiple: true, id: 'parts' });
        document.body.append(i);
      });
      await (await page.$('#parts')).uploadFile(...parts);
      const s = await page.evaluate(async (url, ids) => {
        const { LLM } = await import('/dist/index.js');
        const files = [...document.getElementById('parts').files].sort((a, b) => (a.name < b.name ? -1 : 1));
        const one = async (src, opts) => {
          const llm = await LLM.load(src, { nCtx: 64, cache: false, ...opts });
          const logits = Array.from(await llm.logits(ids));
          const r = { logits, memory: llm.memory(), loadInfo: llm.loadInfo, fileBytes: llm.info.fileBytes };
          llm.free();
          return r;
        };
        const streamed = await one(url, { backend: 'webgpu' });
        const split = await one(files, { backend: 'webgpu' });
        const kept = await one(url, { backend: 'webgpu', keepFile: true });
        const cpu = await one(url, { backend: 'cpu' });
        const cpuSplit = await one(files, { backend: 'cpu' });
        return { streamed, split, kept, cpu, cpuSplit, names: files.map((f) => f.name) };
      }, MODEL_URL, PROMPT_IDS.slice(0, 1));
      const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
      const m = s.streamed.memory;
      const mib = (n) => (n / 2 ** 20).toFixed(1);
      results.webgpuStreaming = {
        streamed: m, kept: s.kept.memory, split: s.split.memory, cpu: s.cpu.memory, seconds: (Date.now() - t0) / 1000,
      };
      check(s.streamed.loadInfo.weightsStreamed && !s.kept.loadInfo.weightsStreamed && s.split.loadInfo.parts === 3,
        `webgpu streaming: streamed ${s.streamed.loadInfo.weightsStreamed}, keepFile ${s.kept.loadInfo.weightsStreamed}, split parts ${s.split.loadInfo.parts} (${s.names.join(', ')})`);
      check(m.weightsHost === 0 && m.weightsGpu >= s.streamed.fileBytes * 0.95 && m.kvCacheGpu === m.kvCache && m.computeGpu > 0,
        `webgpu streaming: weights ${mib(m.weightsHost)} MiB in the heap, ${mib(m.weightsGpu)} MiB on the GPU (file ${mib(s.streamed.fileBytes)} MiB), ` +
        `KV ${mib(m.kvCache)} MiB on the GPU, compute ${mib(m.computeGpu)} of ${mib(m.compute)} MiB on the GPU`);
      check(m.wasmHeap <= 64 * 2 ** 20 + m.kvCache,
        `webgpu streaming: wasm heap ${mib(m.wasmHeap)} MiB <= 64 MiB + KV ${mib(m.kvCache)} MiB (keepFile path: weights ${mib(s.kept.memory.weightsHost)} MiB in the heap as well)`);
      check(s.kept.memory.weightsHost === s.kept.fileBytes, `webgpu keepFile: the file stays in the heap (${mib(s.kept.memory.weightsHost)} MiB)`);
      check(same(s.streamed.logits, s.kept.logits), 'webgpu streaming: logits equal the keepFile path\'s bit for bit');
      check(same(s.split.logits, s.streamed.logits), 'webgpu streaming: a split model (3 Files) gives the same logits');
      check(same(s.cpuSplit.logits, s.cpu.logits) && s.cpuSplit.memory.weightsHost === s.cpuSplit.fileBytes,
        'cpu: a split model (3 Files) gives the whole file\'s logits');
      const c = compareLogits(s.streamed.logits, s.cpu.logits);
      check(c.argmaxOurs === c.argmaxRef && c.maxAbs <= 1.5 && c.kl <= 0.01,
        `webgpu streaming vs cpu: max abs ${c.maxAbs.toFixed(4)}, KL ${c.kl.toExponential(3)}`);
      console.log(`webgpu streaming section: ${results.webgpuStreaming.seconds.toFixed(0)} s`);
      await page.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  // ---- the chat page ----
  page = await browser.newPage();
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  await page.setViewport({ width: 1100, height: 1000 });
  await page.goto(`${base}/demo/chat.html?maxTokens=40`);
  await page.waitForFunction(() => window.__chat?.ready || window.__chat?.error, { timeout: 120000 });
  let st = await page.evaluate(() => window.__chat);
  check(!st.error && st.ready, `chat: loaded ${st.error ?? `in ${st.loadInfo.seconds.toFixed(2)} s, fromCache ${st.loadInfo.fromCache}`}`);
  await page.type('#prompt', 'What is the capital of France?');
  // The page records every text the reply bubble shows: polling from here at 100 ms missed the partial texts
  // once generation ran at ~100 tok/s (a 15-token reply is over in 0.15 s).
  await page.evaluate(() => {
    window.__seenTexts = new Set();
    new MutationObserver(() => {
      const t = document.querySelector('.msg.assistant')?.textContent ?? '';
      if (t) window.__seenTexts.add(t);
    }).observe(document.getElementById('log'), { childList: true, subtree: true, characterData: true });
  });
  await page.click('#send');
  const t0 = Date.now();
  let shot = false;
  while (Date.now() - t0 < 180000) {
    const s = await page.evaluate(() => ({ n: window.__chat.replies.length, seen: window.__seenTexts.size }));
    if (s.seen >= 3 && !shot) { shot = true; await page.screenshot({ path: path.join(OUT, 'chat-streaming.png') }); }
    if (s.n >= 1) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const seen = { size: await page.evaluate(() => window.__seenTexts.size) };
  st = await page.evaluate(() => window.__chat);
  check(st.replies.length === 1 && st.replies[0].length > 0 && !st.error, `chat: reply "${st.replies[0]}"`);
  check(seen.size >= 3, `chat: streamed (${seen.size} distinct partial texts seen)`);
  check(st.stats?.genTokPerS > 0, `chat: ${st.stats?.genTokPerS.toFixed(1)} tok/s shown; memory ${JSON.stringify(st.memory)}`);
  await page.screenshot({ path: path.join(OUT, 'chat.png') });
  // Stop button: a long answer stopped early.
  await page.type('#prompt', 'Write a very long story about a dragon.');
  await page.click('#send');
  await page.waitForFunction(() => (document.querySelectorAll('.msg.assistant')[1]?.textContent ?? '').length > 20, { timeout: 120000 });
  await page.click('#stop');
  await page.waitForFunction(() => window.__chat.replies.length >= 2, { timeout: 60000 });
  st = await page.evaluate(() => window.__chat);
  check(st.stats.generatedTokens < 40, `chat: stop after ${st.stats.generatedTokens} tokens`);
  results.chat = { reply: st.replies[0], loadInfo: st.loadInfo, stats: st.stats, memory: st.memory };
  // Reload: the model comes from the Cache API.
  await page.reload();
  await page.waitForFunction(() => window.__chat?.ready || window.__chat?.error, { timeout: 120000 });
  st = await page.evaluate(() => window.__chat);
  check(st.loadInfo?.fromCache === true, `chat: reload from the Cache API: fromCache ${st.loadInfo?.fromCache} in ${st.loadInfo?.seconds.toFixed(2)} s`);
  results.chat.reloadInfo = st.loadInfo;
  await page.close();

  // ---- benchmark: the single-thread build (a page without isolation), in a worker ----
  // (threads: THREADS_BENCH=1 node www/test-e2e/threads-e2e.mjs)
  if (BENCH) {
    page = await browser.newPage();
    await page.goto(`${base}/demo/?coi=0`);
    const bench = await page.evaluate(async (url, prompt) => {
      const { LLM, clearModelCache } = await import('/dist/index.js');
      await clearModelCache();
      const llm = await LLM.loadInWorker(url, { nCtx: 2048, cache: false });
      const runs = [];
      for (let i = 0; i < 3; i++) {
        await llm.reset();
        const r = await llm.complete(prompt, { maxTokens: 64, temperature: 0 });
        runs.push(r.stats);
      }
      const mem = await llm.memory();
      const load = llm.loadInfo;
      await llm.free();
      return { load, runs, mem };
    }, MODEL_URL, LONG_PROMPT);
    const med = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    results.bench = {
      loadSeconds: bench.load.seconds,
      promptTokens: bench.runs[0].promptTokens,
      promptTokPerS: med(bench.runs.map((r) => r.promptTokPerS)),
      genTokens: bench.runs[0].generatedTokens,
      genTokPerS: med(bench.runs.map((r) => r.genTokPerS)),
      rendererPeakMiB: rendererPeakMiB(),
      wasmHeapMiB: bench.mem.wasmHeap / 2 ** 20,
      kernels: bench.load.kernels,
      runs: bench.runs,
    };
    console.log(`bench (chromium, worker, 1 thread): ${JSON.stringify(results.bench, (k, v) => (k === 'runs' ? undefined : v))}`);
    if (process.env.NATIVE_GGWEB) {
      const j = JSON.parse(execFileSync(process.env.NATIVE_GGWEB, ['generate', '-m', SMOLLM2, '-p', LONG_PROMPT, '-n', '64', '--threads', '1', '--json'], { encoding: 'utf8', maxBuffer: 1 << 26 }));
      results.native = { promptTokens: j.prompt_ids.length, promptTokPerS: j.prompt_tok_per_s, genTokPerS: j.gen_tok_per_s };
      console.log(`native ggweb generate --threads 1: ${JSON.stringify(results.native)}`);
    }
  }
  if (logs.some((l) => l.startsWith('[pageerror]') || l.startsWith('[error]'))) console.log(logs.join('\n'));
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  fs.writeFileSync(path.join(OUT, 'llm-e2e.json'), JSON.stringify(results, null, 2));
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);
