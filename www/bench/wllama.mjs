// ggweb beside wllama (llama.cpp compiled to wasm) in one headless Chromium session: SmolLM2-135M
// Q4_1 and Qwen2.5-0.5B Q4_K_M (or $MODELS, comma-separated files in the model cache), a
// ~119-token prompt, 32 greedy tokens; a fresh cross-origin isolated page per run, interleaved,
// $ROUNDS rounds (default 2). Issue 15's anchor, measured as ../shared/notes/browser-anchor.md
// describes. A benchmark, not a test:
//   node www/bench/wllama.mjs            (after scripts/build-web.sh; fetches nothing but wllama)
// wllama 3.13.0 comes from npm into ~/.cache/ggweb/tools/wllama-3.13.0 (once). Prints one line per
// run and a summary of tok/s with ggweb / wllama ratios at the same thread count.
// Env: JS_FLAGS (V8 flags for Chromium), THREADS=1,2 (the thread counts), ENGINES=ggweb,wllama,ggweb-st (which to run; ggweb-st is
// the single-thread relaxed-SIMD build, 1 thread only), GGWEB_OLD=<dir of another threads build's
// ggweb_bg.wasm> adds `ggweb-old` runs of that build beside this one (an A/B of two builds in the
// same session, interleaved), ggweb-cold in ENGINES runs ggweb without its load-time warm-up,
// CHROME=<browser binary>, NATIVE=<path to the ggweb CLI> adds `native` runs (`ggweb generate`, same prompt,
// context and tokens, the CPU at each thread count) between the browser runs, and the ratios of ggweb's
// browser generation to native at the same thread count, per round (adjacent runs) and of the medians:
// issue 15's "browser 1-thread generation ≥ 60 % of native 1-thread", measured with the host's noise
// shared.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const WLLAMA_VERSION = '3.13.0';
const cache = process.env.GGWEB_CACHE || path.join(os.homedir(), '.cache', 'ggweb');
const wdir = path.join(cache, 'tools', `wllama-${WLLAMA_VERSION}`);
const pkg = path.join(wdir, 'node_modules', '@wllama', 'wllama');
if (!fs.existsSync(path.join(pkg, 'esm', 'index.js'))) {
  fs.mkdirSync(wdir, { recursive: true });
  execFileSync('npm', ['install', '--prefix', wdir, '--no-audit', '--no-fund', '--loglevel=error', `@wllama/wllama@${WLLAMA_VERSION}`], { stdio: 'inherit' });
}
process.env.GGWEB_VENDOR_WLLAMA = path.join(pkg, 'esm');
const MODELS = (process.env.MODELS || process.env.MODEL || 'SmolLM2-135M-Instruct.Q4_1.gguf,qwen2.5-coder-0.5b-instruct-q4_k_m.gguf').split(',');
const ROUNDS = Number(process.env.ROUNDS || 2);
const THREADS = (process.env.THREADS || '1,2').split(',').map(Number);
const OLD = process.env.GGWEB_OLD && path.resolve(process.env.GGWEB_OLD);
if (OLD) process.env.GGWEB_VENDOR_GGWEB_OLD = OLD;
const NATIVE = process.env.NATIVE && path.resolve(process.env.NATIVE);
const ENGINES = (process.env.ENGINES || `ggweb,${OLD ? 'ggweb-old,' : ''}wllama,ggweb-st`).split(',');
if (NATIVE && !ENGINES.includes('native')) ENGINES.unshift('native');
for (const m of MODELS) {
  if (!fs.existsSync(path.join(cache, 'models', m))) throw new Error(`no model ${m} in ${path.join(cache, 'models')} (scripts/fetch-models.sh)`);
}
const PROMPT =
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
  executablePath: process.env.CHROME || '/usr/bin/chromium', headless: true, protocolTimeout: 900000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage',
    // e.g. JS_FLAGS=--no-enable-avx-vnni: V8 as on a CPU without AVX-VNNI.
    ...(process.env.JS_FLAGS ? [`--js-flags=${process.env.JS_FLAGS}`] : [])],
});

const LABELS = {
  ggweb: (n) => `ggweb threads build, ${n} thread${n > 1 ? 's' : ''}`,
  'ggweb-old': (n) => `ggweb threads build from GGWEB_OLD, ${n} thread${n > 1 ? 's' : ''}`,
  'ggweb-cold': (n) => `ggweb threads build, no load-time warm-up, ${n} thread${n > 1 ? 's' : ''}`,
  wllama: (n) => `wllama, ${n} thread${n > 1 ? 's' : ''}`,
  ...(NATIVE ? { native: (n) => `native ggweb CLI, ${n} thread${n > 1 ? 's' : ''}` } : {}),
};
// The native CLI on the same prompt, context and token count (greedy), the browser idle meanwhile.
const runNative = (cfg) => {
  const t0 = performance.now();
  const out = execFileSync(NATIVE, ['generate', '-m', path.join(cache, 'models', cfg.model), '-p', PROMPT, '-n', '32', '--temp', '0',
    '--threads', `${cfg.threads}`, '--ctx-size', '512', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], maxBuffer: 1 << 24 });
  const d = JSON.parse(out.trim().split('\n').pop());
  return { load: (performance.now() - t0) / 1000, prompt: d.prompt_tok_per_s, gen: d.gen_tok_per_s, promptN: d.prompt_ids?.length, genN: d.ids?.length, text: d.text ?? '' };
};
const configs = [];
for (const model of MODELS) {
  for (const threads of THREADS) {
    for (const engine of ENGINES) {
      if (LABELS[engine]) configs.push({ model, engine, threads, label: LABELS[engine](threads) });
    }
  }
  if (ENGINES.includes('ggweb-st')) configs.push({ model, engine: 'ggweb-st', threads: 1, label: 'ggweb relaxed-SIMD build (no threads), 1 thread' });
}
const rows = [];
try {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const cfg of configs) {
      if (cfg.engine === 'native') {
        const r = runNative(cfg);
        rows.push({ round, ...cfg, ...r, errors: [] });
        console.log(`round ${round} ${cfg.model} ${cfg.label}: prompt ${r.promptN} tok ${r.prompt?.toFixed(1)} tok/s, gen ${r.genN} tok ${r.gen?.toFixed(1)} tok/s ${JSON.stringify(r.text.slice(0, 48))}`);
        continue;
      }
      const page = await browser.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(`${base}/test-e2e/blank.html${cfg.engine === 'ggweb-st' ? '?coi=0' : ''}`);
      const r = await page.evaluate(async (cfg, url, prompt) => {
        const t0 = performance.now();
        if (cfg.engine === 'wllama') {
          const { Wllama } = await import('/vendor/wllama/index.js');
          const w = new Wllama({ default: '/vendor/wllama/wasm/wllama.wasm' }, { suppressNativeLog: true });
          await w.loadModelFromUrl(url, { n_threads: cfg.threads, n_ctx: 512 });
          const load = (performance.now() - t0) / 1000;
          const out = await w.createCompletion({ prompt, max_tokens: 32, temperature: 0 });
          const t = out.timings ?? {};
          const text = out.choices?.[0]?.text ?? '';
          await w.exit();
          return { load, prompt: t.prompt_per_second, gen: t.predicted_per_second, promptN: t.prompt_n, genN: t.predicted_n, text, isolated: self.crossOriginIsolated };
        }
        const { LLM } = await import('/dist/index.js');
        const engine = cfg.engine === 'ggweb-st' ? {} : { threads: true, nThreads: cfg.threads };
        if (cfg.engine === 'ggweb-old') engine.wasm = `${location.origin}/vendor/ggweb-old/ggweb_bg.wasm`;
        const llm = await LLM.loadInWorker(url, { nCtx: 512, cache: false, engine, warmUp: cfg.engine !== 'ggweb-cold' });
        const load = (performance.now() - t0) / 1000;
        const g = await llm.complete(prompt, { maxTokens: 32, temperature: 0 });
        const cpuThreads = llm.loadInfo.backendInfo.cpuThreads;
        const pageTouch = llm.loadInfo.pageTouch;
        const probe = llm.loadInfo.pageTouchProbe;
        await llm.free();
        return { load, prompt: g.stats.promptTokPerS, gen: g.stats.genTokPerS, promptN: g.stats.promptEvaluated, genN: g.stats.generatedTokens, text: g.text, cpuThreads, pageTouch, probe, isolated: self.crossOriginIsolated };
      }, cfg, `/models/${cfg.model}`, PROMPT);
      await page.close();
      rows.push({ round, ...cfg, ...r, errors });
      console.log(`round ${round} ${cfg.model} ${cfg.label}: load ${r.load.toFixed(2)} s, prompt ${r.promptN} tok ${r.prompt?.toFixed(1)} tok/s, gen ${r.genN} tok ${r.gen?.toFixed(1)} tok/s` +
        `${r.cpuThreads ? ` (cpuThreads ${r.cpuThreads}, pageTouch ${r.pageTouch}${r.probe ? ` on ${r.probe.onMs} / off ${r.probe.offMs} ms` : ''})` : ''} ${JSON.stringify(r.text.slice(0, 48))}${errors.length ? ` errors: ${errors.join(' | ')}` : ''}`);
    }
  }
  const range = (v) => `${Math.min(...v).toFixed(1)}–${Math.max(...v).toFixed(1)}`;
  const med = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  console.log(`\n${os.cpus().length} CPUs (${os.cpus()[0]?.model}), Chromium ${(await browser.version())}, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  for (const model of MODELS) {
    console.log(`\n${model}\n| engine | prompt tok/s | generation tok/s | load s |\n|---|---|---|---|`);
    for (const cfg of configs.filter((c) => c.model === model)) {
      const rs = rows.filter((r) => r.model === model && r.label === cfg.label);
      console.log(`| ${cfg.label} | ${range(rs.map((r) => r.prompt))} | ${range(rs.map((r) => r.gen))} | ${range(rs.map((r) => r.load))} |`);
    }
    for (const n of THREADS) {
      // Browser generation over native, each round's ggweb run against the native run just before it.
      const pairs = [];
      for (let round = 1; round <= ROUNDS; round++) {
        const g = rows.find((r) => r.model === model && r.engine === 'ggweb' && r.threads === n && r.round === round);
        const nv = rows.find((r) => r.model === model && r.engine === 'native' && r.threads === n && r.round === round);
        if (g && nv) pairs.push(g.gen / nv.gen);
      }
      if (pairs.length) console.log(`ggweb browser / native generation at ${n} thread${n > 1 ? 's' : ''}: per round ${pairs.map((x) => `${(100 * x).toFixed(0)} %`).join(', ')}`);
    }
    for (const other of ['wllama', 'ggweb-old', 'ggweb-cold', 'native']) {
      for (const n of THREADS) {
        const g = rows.filter((r) => r.model === model && r.engine === 'ggweb' && r.threads === n);
        const w = rows.filter((r) => r.model === model && r.engine === other && r.threads === n);
        if (!g.length || !w.length) continue;
        console.log(`ggweb / ${other} at ${n} thread${n > 1 ? 's' : ''} (medians): prompt ${(med(g.map((r) => r.prompt)) / med(w.map((r) => r.prompt))).toFixed(2)}×, generation ${(med(g.map((r) => r.gen)) / med(w.map((r) => r.gen))).toFixed(2)}×`);
      }
    }
  }
  fs.mkdirSync(path.join(ROOT, 'test-output'), { recursive: true });
  fs.writeFileSync(path.join(ROOT, 'test-output', 'wllama-bench.json'), JSON.stringify(rows, null, 2));
} finally {
  await browser.close();
  server.close();
}
